"""Deserializers: how a stream's record values become the fields queries refer to.

* ``identity`` (SQE's default): no parsing; queries see the source columns
  ``_key``, ``_value`` (bytes), ``_topic``, ``_partition``, ``_offset``,
  ``_timestamp`` and the decoded key ``_pid``, ``_source_partition``,
  ``_source_offset``.
* ``json``: the value is a JSON object; each top-level key becomes a field
  with the type its values have in this micro-batch (SQE's JSON deserializer
  was dynamically typed; Spark needs a type, so it is inferred per batch with
  ``schema_of_variant_agg``: numbers as BIGINT or DECIMAL, strings, booleans;
  nested objects and arrays stay VARIANT).  A key absent from the whole batch
  but named by a query is a NULL string field.  A value that is not a JSON
  object is counted and marked (:attr:`Deserialized.undecodable`): the runner's
  bad-record policy fails the batch naming it, or dead-letters it.  The runner keeps
  what batches inferred and plans the stream with it (:mod:`sqe.engine.batch.learned_types`).
  With declared fields (``jw.sqe.spout.fields``), those fields alone are extracted,
  each as its declared type (a value that does not fit it is NULL) without inferring
  any (a field declared without a type still gets the type of its batch).  Where the
  source read them already (``jsonFields``, :mod:`sqe.source.json_fields`), a record's
  fields are the source's and Spark parses only the values the source did not read.

* ``avro``: the source decoded each value against the stream's reader schema
  (:mod:`sqe.source.values`); each field of the record becomes a column of the type the schema
  gives it (a NULL value, a tombstone: NULL fields).  Values that do not decode never reach
  Spark (the source applies ``badRecordPolicy`` to them).

All keep the source columns, so ``_key``, ``_offset`` etc. remain usable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sqe.config.record_schemas import RECORD_FORMATS
from sqe.errors import ArgumentError
from sqe.source.json_fields import OK, PREFIX, arrow_fields, arrow_type, json_column, spark_type
from sqe.source.values import VALUE
from sqe.wire.columns import field_column

#: Spark's setting: whether a JSON object may repeat a key (its last value is kept).
DUPLICATE_KEYS = "spark.sql.variant.allowDuplicateKeys"

__all__ = ["BAD_COLUMN", "DUPLICATE_KEYS", "SCHEMA_COLUMN", "Deserialized", "Summary",
           "deserialize", "read_in_source", "summary_columns", "top_level_fields"]

_JSON = "_sqe_json"


@dataclass(frozen=True)
class Deserialized:
    """A batch with its fields as columns, and how many values could not be parsed."""

    frame: DataFrame
    unparseable_values: int
    #: fields asked for that no record of the batch holds (made NULL)
    missing: tuple[str, ...] = ()
    #: the fields extracted and their Spark types (to read part of the batch the same way)
    types: tuple[tuple[str, str], ...] = ()
    #: true for the rows whose value does not decode (None: every value decodes)
    undecodable: Column | None = None
    #: the batch's top-level JSON keys and the types inferred for them (``VOID``: no value)
    inferred: tuple[tuple[str, str], ...] = ()

    @property
    def present(self) -> tuple[str, ...]:
        """The JSON fields the batch's records hold (inferred; empty when fields are
        declared)."""
        return tuple(dict.fromkeys(name for name, _ in self.inferred))


def top_level_fields(object_type: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of an ``OBJECT<a: BIGINT, b: OBJECT<...>>`` type string."""
    text = object_type.strip()
    if not (text.upper().startswith("OBJECT<") and text.endswith(">")):
        return []
    body, fields, depth, start, quoted = text[7:-1], [], 0, 0, False
    parts = []
    for i, ch in enumerate(body):
        if ch == "`":
            quoted = not quoted  # a doubled backtick inside a name toggles twice
        elif quoted:
            continue
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for part in parts:
        if not part.strip():
            continue
        part = part.strip()
        if part.startswith("`"):
            end = 1
            while True:  # the closing backtick is one not followed by another
                end = part.index("`", end)
                if part[end + 1:end + 2] != "`":
                    break
                end += 2
            name, dtype = part[1:end].replace("``", "`"), part[end + 1:].lstrip()[1:]
        else:
            name, _, dtype = part.partition(":")
        fields.append((name.strip(), dtype.strip()))
    return fields


def _spark_type(variant_type: str) -> str:
    """The type to extract a field as: nested values stay VARIANT, all-NULL ones are strings."""
    upper = variant_type.upper()
    if upper.startswith(("OBJECT", "ARRAY", "VARIANT")):
        return "variant"
    return "string" if upper == "VOID" else variant_type


def _field(name: str, target: str, read: bool = False) -> Column:
    """Top-level field ``name`` of the parsed value as ``target``; any name works.  ``read``:
    the source's column of it where the source read the value."""
    if "'" not in name:
        parsed = F.try_variant_get(_JSON, "$['" + name + "']", target)
    elif '"' not in name:
        parsed = F.try_variant_get(_JSON, '$["' + name + '"]', target)
    else:
        as_map = F.try_variant_get(_JSON, "$", "map<string,variant>")
        parsed = F.try_variant_get(F.element_at(as_map, F.lit(name)), "$", target)
    return F.when(_read_here(), field_column(json_column(name))).otherwise(parsed) if read else parsed


def _read_here() -> Column:
    """True in a row whose value the source read (:data:`~sqe.source.json_fields.OK`)."""
    return F.coalesce(F.col(OK), F.lit(False))


def read_in_source(frame: DataFrame, fields: Iterable[tuple[str, str]]) -> bool:
    """Whether ``frame`` (the source's rows) holds every one of ``fields`` as the source read
    it, of its type, and Spark reads a repeated JSON key as the source does (its last value)."""
    types = {f.name: f.dataType for f in frame.schema.fields}
    if OK not in types:
        return False
    for name, target in fields:
        arrow = arrow_type(target)
        if arrow is None or types.get(json_column(name)) != spark_type(arrow):
            return False
    keeps_last = frame.sparkSession.conf.get(DUPLICATE_KEYS, "false")
    return str(keeps_last).strip().lower() == "true"


#: The names of the summary columns :func:`summary_columns` adds to an aggregation.
SCHEMA_COLUMN, BAD_COLUMN = "_sqe_json_schema", "_sqe_json_bad"


@dataclass(frozen=True)
class Summary:
    """What the JSON deserializer needs to know of a whole batch: the schema of its values
    (``schema_of_variant_agg``; None when no value is an object, or when not inferred) and how
    many values are not JSON objects."""

    schema: str | None
    bad: int

    @classmethod
    def of_groups(cls, groups: Iterable[Any]) -> Summary | None:
        """The batch's summary from the rows of an aggregation by groups that had
        :func:`summary_columns` (the batch's groups, each a part of it): the bad values add
        up; the schema is the groups' one schema, or None (not known: the deserializer infers
        it over the whole batch) when the groups' schemas differ, since merging two schemas
        is Spark's to do."""
        schemas, bad = set(), 0
        for g in groups:
            bad += int(g[BAD_COLUMN] or 0)
            if g[SCHEMA_COLUMN] not in (None, "VOID"):  # VOID: no object in the group
                schemas.add(g[SCHEMA_COLUMN])
        if len(schemas) > 1:
            return None
        return cls(next(iter(schemas), None), bad)


def _parsed(read: bool = False) -> tuple[Column, Column]:
    """The value parsed as JSON when it is an object (else NULL), and a condition true for the
    rows whose value is not a JSON object.  ``read``: the source read some values (Spark then
    parses none of them: their text is NULL here, whatever Spark evaluates first)."""
    text = F.col("_value").cast("string")
    if read:
        text = F.when(~_read_here(), text)
    value = F.try_parse_json(text)
    # Only JSON objects have fields; any other value (not JSON, or an array, string or
    # number) passes with NULL fields and is counted, without hiding the fields of the rest.
    # A value that parses is an object exactly when its first non-blank character is a brace
    # (cheaper than the schema string of every value, which schema_of_variant builds).
    is_object = value.isNotNull() & text.rlike(r"^\s*\{")
    undecodable = F.col("_value").isNotNull() & F.coalesce(~is_object, F.lit(True))
    if read:
        undecodable = ~_read_here() & undecodable
    return F.when(is_object, value), undecodable


def _sources(column: str) -> bool:
    """Whether ``column`` is a field the source read (dropped once deserialized; its
    :data:`~sqe.source.json_fields.OK` stays, for :attr:`Deserialized.undecodable`)."""
    return column.startswith(PREFIX)


def _infers(declared: Mapping[str, str | None] | None) -> bool:
    return declared is None or None in declared.values()


def summary_columns(kind: str | None, declared: Mapping[str, str | None] | None
                    ) -> list[Column]:
    """Aggregate columns that compute a batch's :class:`Summary` for deserializer ``kind``
    inside an aggregation the batch runs anyway (its first job), so that :func:`deserialize`
    starts no job of its own; none for a deserializer without one."""
    if kind != "json":
        return []
    parsed, undecodable = _parsed()
    schema = (F.schema_of_variant_agg(parsed) if _infers(declared)
              else F.lit(None).cast("string"))
    return [schema.alias(SCHEMA_COLUMN), F.count_if(undecodable).alias(BAD_COLUMN)]


def _record_fields(frame: DataFrame, wanted: Iterable[str]) -> Deserialized:
    """The fields of the records the source decoded (:data:`~sqe.source.values.VALUE`), each
    a column; a field named like a source column is left to the column, as a JSON key is."""
    struct = frame.schema[VALUE].dataType
    assert isinstance(struct, StructType)
    taken = {c.lower() for c in frame.columns}
    columns, fields = [], []
    for f in struct.fields:
        if f.name.lower() in taken:
            continue
        columns.append(F.col(VALUE).getField(f.name).alias(f.name))
        fields.append((f.name, f.dataType.simpleString()))
        taken.add(f.name.lower())
    missing = [name for name in dict.fromkeys(wanted) if name.lower() not in taken]
    columns += [F.lit(None).cast("string").alias(name) for name in missing]
    out = frame.select(*[frame[c] for c in frame.columns if c != VALUE], *columns)
    return Deserialized(out, 0, tuple(missing), tuple(fields))


def deserialize(frame: DataFrame, kind: str | None, wanted: Iterable[str] = (),
                declared: Mapping[str, str | None] | None = None,
                empty: bool = False, summary: Summary | None = None) -> Deserialized:
    """The batch ``frame`` with the fields of deserializer ``kind`` (None means identity).

    ``declared`` (``jw.sqe.spout.fields``) are the only JSON fields extracted, each as its
    declared Spark type; a field declared without a type gets the type of this batch.
    ``empty``: the caller knows ``frame`` holds no row, so no Spark job looks at it (the batch
    then has no inferred field: the declared ones are extracted, a field without a declared
    type as a string, and the wanted ones are NULL strings).  ``summary``: the batch's schema
    and bad values, computed already (:func:`summary_columns`): no Spark job either.
    """
    if kind in (None, "identity"):
        return Deserialized(frame, 0)
    if kind in RECORD_FORMATS:
        return _record_fields(frame, wanted)
    if kind != "json":
        raise ArgumentError(f"unknown deserializer {kind!r}")
    in_source = arrow_fields(declared)  # the fields the runner has the source read
    read = in_source is not None and read_in_source(frame, in_source)
    value, undecodable = _parsed(read)
    parsed = frame.withColumn(_JSON, value)
    if empty:
        summary = Summary(None, 0)
    elif summary is None:
        row = parsed.agg(
            F.schema_of_variant_agg(_JSON).alias("schema") if _infers(declared)
            else F.lit("").alias("schema"),
            F.count_if(undecodable).alias("bad"),
        ).first()
        assert row is not None  # a global aggregate has one row
        summary = Summary(row["schema"], int(row["bad"]))
    keys = top_level_fields(summary.schema or "")
    inferred = {name: _spark_type(vtype) for name, vtype in keys}
    fields = list(inferred.items()) if declared is None else [
        (name, dtype or inferred.get(name, "string")) for name, dtype in declared.items()]
    # Spark resolves column names case-insensitively: compare them that way.
    taken = {c.lower() for c in parsed.columns}
    columns = []
    for name, target in fields:
        if name.lower() in taken:  # a JSON key named like a source column: the column wins
            continue
        columns.append(_field(name, target, read).alias(name))
        taken.add(name.lower())
    missing = []
    for name in dict.fromkeys(wanted):
        if name.lower() not in taken:
            columns.append(F.lit(None).cast("string").alias(name))
            taken.add(name.lower())
            missing.append(name)
    out = parsed.select(*[parsed[c] for c in frame.columns if not _sources(c)], *columns)
    return Deserialized(out, summary.bad, tuple(missing), tuple(fields), undecodable,
                        tuple(keys))
