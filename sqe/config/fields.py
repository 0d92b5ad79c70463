"""The fields of a topology's streams, and the queries' field references checked against them.

What a stream's fields are, as the runner makes them:

* a KAFKA stream with deserializer ``identity`` (or none): the record columns
  (:data:`~sqe.wire.columns.RECORD_COLUMNS`: ``_key``, ``_value``, ``_offset``, ...);
* a FIXED stream: ``jw.sqe.spout.fixed.fields`` and the record columns;
* a KAFKA stream with deserializer ``avro``: the fields of its reader schema
  (:mod:`sqe.config.record_schemas`) and the record columns;
* a KAFKA stream with deserializer ``json``: ``jw.sqe.spout.fields`` and the record
  columns when the fields are declared; unknown until run time otherwise (nothing is
  checked here; :func:`~sqe.lang.references.stream_references` says what its queries read);
* a query's output, read by its ``objectName`` (an intermediate stream, or SQE's reading
  of any query's output): that query's ``insertInto -> fields``.

:func:`field_problems` follows the chain of streams in file order and reports every
field a query reads (:func:`~sqe.lang.references.query_references`: select, where,
aggregations' arguments and the columns of ``{sql: ...}`` strings) that its stream does
not have, with the closest field it has; and what a Kafka state's ``filterValue`` reads of its
query's output.  Names match case-insensitively, as Spark's do.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from sqe.config.record_schemas import RECORD_FORMATS, ReaderSchema
from sqe.config.settings import unless_refused
from sqe.config.views import StateSettings, StreamSettings
from sqe.lang.expressions import Sql, walk
from sqe.lang.references import Reference, expression_references, query_references
from sqe.lang.sql import SqlSyntaxError, position, sql_columns
from sqe.lang.topology import CreateStream, Query, Topology, sql_error
from sqe.wire.columns import HEADERS, RECORD_COLUMNS

__all__ = ["StreamFields", "field_problems", "stream_fields"]


@dataclass(frozen=True)
class StreamFields:
    """The fields a stream's queries may read, and where they come from (for messages)."""

    name: str
    fields: tuple[str, ...]
    origin: str

    def closest(self, name: str) -> str | None:
        """The field most like ``name``, or ``None`` when none is close."""
        lowered = {f.lower(): f for f in self.fields}
        match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
        return lowered[match[0]] if match else None

    def has(self, name: str) -> bool:
        """Whether ``name`` is a field (case-insensitively)."""
        return name.lower() in {f.lower() for f in self.fields}


def stream_fields(stream: CreateStream, s: StreamSettings, schema: ReaderSchema | None = None
                  ) -> StreamFields | None:
    """The fields of a ``CreateStream`` (``schema``: its reader schema, for a stream of
    records); ``None`` when they are known only at run time, or not at all."""
    name = stream.streamName
    record = (*RECORD_COLUMNS, HEADERS) if s.include_headers else RECORD_COLUMNS
    if stream.spoutName == "FIXED":
        if not s.fixed_fields:
            return None  # reported as a missing option
        return StreamFields(name, (*s.fixed_fields, *RECORD_COLUMNS),
                            "jw.sqe.spout.fixed.fields and the record columns")
    if stream.deserializer in RECORD_FORMATS:
        if schema is None:
            return None  # reported where it was looked up (reader_schemas)
        return StreamFields(name, (*schema.struct.fieldNames(), *record),
                            f"the fields of {schema.origin.partition(': ')[2]} and the record "
                            "columns")
    if stream.deserializer == "json":
        if s.declared_fields is None:
            return None
        return StreamFields(name, (*s.declared_fields, *record),
                            "jw.sqe.spout.fields and the record columns")
    return StreamFields(name, record,
                        "only the record columns, as its deserializer is identity "
                        "(deserializer: json reads the fields of JSON values)")


def _declared_problem(stream: CreateStream, s: StreamSettings, where: str) -> list[str]:
    if s.declared_fields is None or (stream.spoutName == "KAFKA"
                                     and stream.deserializer == "json"):
        return []
    what = ("a FIXED stream's fields are jw.sqe.spout.fixed.fields"
            if stream.spoutName == "FIXED" else
            f"stream {stream.streamName} has deserializer {stream.deserializer or 'identity'}")
    origin = s.origin(StreamSettings.declared_fields)
    given = "" if origin.startswith(where) else f" (from {origin})"
    return [f"{where}: jw.sqe.spout.fields{given} declares the fields of a stream with "
            f"deserializer json; {what}"]


def _unknown(where: str, ref: Reference, stream: StreamFields) -> str:
    at = (f" ({position(ref.sql, ref.offset)} of {json.dumps(ref.sql)})"
          if ref.sql is not None else "")
    head = f"{where} -> {ref.where}: no field {ref.name} in stream {stream.name}{at}"
    close = stream.closest(ref.name)
    if close is not None:
        return f"{head}; did you mean {close}?"
    return f"{head}; it has {stream.origin}: {', '.join(stream.fields)}"


def _filter_value_problems(query: Query, state: StateSettings, where: str) -> list[str]:
    """A Kafka state's ``filterValue`` is computed over the query's output: its SQL must parse
    and its fields be the query's ``insertInto -> fields``."""
    expr = state.kafka.filter_value
    if query.insertInto.stateName != "KAFKA" or expr is None:
        return []
    place = ("jw.sqe.state.kafka.filterValue",)
    problems = []
    for path, node in walk(expr, place):
        if isinstance(node, Sql):
            try:
                sql_columns(node.text)
            except SqlSyntaxError as exc:
                problems.append(f"{where} -> {' -> '.join((*path, 'sql'))}: "
                                f"{sql_error(node.text, exc)}")
    output = StreamFields(query.insertInto.objectName, tuple(query.insertInto.fields),
                          "insertInto -> fields")
    return problems + [_unknown(where, ref, output) for ref in expression_references(expr, place)
                       if not output.has(ref.name)]


def field_problems(topology: Topology, streams: Mapping[str, StreamSettings],
                   states: Mapping[int, StateSettings] | None = None,
                   schemas: Mapping[str, ReaderSchema] | None = None) -> list[str]:
    """Every field a query reads that its stream lacks, one located sentence each (and every
    field a Kafka state's ``filterValue`` reads that the query's output lacks, with ``states``,
    by command index); what reads an option whose value was refused is not checked."""
    problems: list[str] = []
    known: dict[str, StreamFields | None] = {}
    for index, command in enumerate(topology.commands):
        where = f"{topology.path}: {topology.label(command)}"
        if isinstance(command, CreateStream):
            s = streams.get(command.streamName)
            known[command.streamName] = None  # unless known: fields of a refused option are not
            if s is not None:
                known[command.streamName] = unless_refused(partial(
                    stream_fields, command, s, (schemas or {}).get(command.streamName)), None)
                problems += unless_refused(partial(_declared_problem, command, s, where), [])
        elif isinstance(command, Query):
            stream = known.get(command.from_.objectName)
            if stream is not None:
                problems += [_unknown(where, ref, stream) for ref in query_references(command)
                             if not stream.has(ref.name)]
            if states is not None and index in states:
                problems += unless_refused(
                    partial(_filter_value_problems, command, states[index], where), [])
            into = command.insertInto
            known[into.objectName] = StreamFields(
                into.objectName, tuple(into.fields),
                f"the fields of {topology.label(command)} (insertInto -> fields)")
    return problems
