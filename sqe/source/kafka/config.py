"""What one ``sqe-kafka`` source reads and how: its config, and the offset ranges of one task.

The reader options of the ``sqe-kafka`` data source are the stream's own
``jw.sqe.spout.kafka.*`` options, with or without that prefix
(``brokers``, ``maxRecordsPerBatch``, ``filterReplays``,
``filterReplays.redis.url``, ``consumer.security.protocol``, ...: see
``sqe options``), validated by the same registry as a topology file, plus the
reader's own:

* ``topic`` (required): the topic to read;
* ``hwmConsumer``: the consumer whose high-water marks filter replays
  (``<topology>.<stream>``; required with ``filterReplays``);
* ``emitTally``: also yield each task's counters as one tally row
  (:class:`~sqe.wire.columns.Tally`);
* ``reportRead``: with ``filterReplays``, each task of a streaming batch reports what it read
  (its marks and counters) to the HWM store, for the batch's commit
  (:mod:`sqe.source.read_report`: a hop's rows need not say where they came from), and its
  offsets name the topic (``{"<topic>": {"<partition>": <offset>}}``, as Spark's own Kafka
  source's do), so that a query reading two hops (a stream-stream join) tells their offsets
  apart in its checkpoint;
* ``endingOffsets`` (a batch read, ``spark.read``, only): where the read ends, Spark's JSON
  ``{"<partition>": <offset>}``, as ``startingOffsets`` (then JSON too) says where it starts;
* ``valueFormat`` (``avro``, ``protobuf``), with ``valueSchema``, ``valueMessage`` and
  ``valueImports`` (JSON: import name to schema text): the values are records of this reader
  schema (by default the stream's schema file or registry subject), decoded in the reader
  (:mod:`sqe.source.values`);
* ``capFirstBatch``: the query does not run with the AvailableNow trigger, so on PySpark
  without admission control (4.0, 4.1) its first batch is capped too
  (:mod:`sqe.source.admission`; ``sqe run`` sets it unless ``--once``);
* ``jsonFields``: JSON ``{"<field>": "<type>"}`` of fields to read from each JSON value in
  the reader (:mod:`sqe.source.json_fields`), yielded as the columns
  ``_sqe_json_ok`` and ``_sqe_jf_<field>`` (the JSON deserializer of a stream with declared
  fields takes them; the runner sets it from ``jw.sqe.spout.fields``);

:class:`SourceConfig` is the validated result; :meth:`SourceConfig.to_options`
gives the options back, so the runner and a direct user build the source the
same way.  :class:`RangePartition` is one Kafka partition's offset range of a
micro-batch.

Example::

    >>> cfg = SourceConfig.from_options({"topic": "events", "brokers": "k1:9092,k2:9092",
    ...                                  "maxRecordsPerBatch": "5000"})
    >>> cfg.stream.brokers, cfg.stream.max_records
    (('k1:9092', 'k2:9092'), 5000)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pyspark.sql.datasource import InputPartition

from sqe.clients.kafka import consumer_conf, new_consumer
from sqe.config.record_schemas import RECORD_FORMATS, ReaderSchema, reader_schema
from sqe.config.registry import REGISTRY
from sqe.config.settings import Settings
from sqe.config.views import StreamSettings
from sqe.errors import OptionError, SchemaError, SourceError, TopologyError
from sqe.lang.post_filter import Node, compile_filter
from sqe.source.json_fields import arrow_fields, fields_problem
from sqe.wire.columns import RECORD_COLUMNS

__all__ = ["OPTION_PREFIX", "RangeGroup", "RangePartition", "SourceConfig", "group_ranges",
           "parse_offsets"]

#: The prefix a reader option may leave out.
OPTION_PREFIX = "jw.sqe.spout.kafka."

#: The reader's own options (not ``jw.sqe.*`` keys), by their lower-case spelling.
_OWN = {"topic": "topic", "hwmconsumer": "hwmConsumer", "emittally": "emitTally",
        "reportread": "reportRead",
        "endingoffsets": "endingOffsets", "jsonfields": "jsonFields",
        "producersahead": "producersAhead", "valueformat": "valueFormat",
        "valueschema": "valueSchema", "valuemessage": "valueMessage",
        "valueimports": "valueImports", "capfirstbatch": "capFirstBatch"}

#: The prefix of the record schema options (``schema.*``, ``schemaRegistry.*``).
SCHEMA_PREFIX = "jw.sqe.spout.schema"

#: Registry keys a reader option may name, by lower-case spelling (Spark lower-cases keys).
_STREAM_KEYS = {key.lower(): key for key in REGISTRY
                if key.startswith((OPTION_PREFIX, SCHEMA_PREFIX))}


def _option_key(name: str) -> str:
    """The ``jw.sqe.*`` key of a reader option (with or without the prefix, any case)."""
    lowered = name.lower()
    full = (lowered if lowered.startswith("jw.sqe.") else "jw.sqe.spout." + lowered
            if lowered.startswith("schema") else OPTION_PREFIX + lowered)
    return _STREAM_KEYS.get(full, full)  # else a consumer.<property>, or unknown: lookup says


def _flag(options: Mapping[str, Any], name: str) -> bool:
    raw = str(options.get(name, "false")).strip().lower()
    if raw not in ("true", "false"):
        raise SourceError(f"sqe-kafka option {_OWN[name]} must be true or false, got {raw!r}")
    return raw == "true"


def parse_offsets(text: str) -> dict[int, int]:
    """``{"0": 42}`` (or ``{"<topic>": {"0": 42}}``) as ``{0: 42}`` (a checked
    ``startingOffsets`` value)."""
    return by_partition(json.loads(text))


def by_partition(offsets: Mapping[str, Any]) -> dict[int, int]:
    """Offsets by partition, from Spark's JSON of them as this source keeps them:
    ``{"<partition>": <offset>}``, or, for a source that reports its reads (a hop's, whose
    query may read more than one topic), ``{"<topic>": {"<partition>": <offset>}}``.

        >>> by_partition({"0": 42}), by_partition({"clicks": {"1": 7}})
        ({0: 42}, {1: 7})
    """
    if len(offsets) == 1:
        (inner,) = offsets.values()
        if isinstance(inner, Mapping):
            offsets = inner
    return {int(p): int(o) for p, o in offsets.items()}


def _json_object(text: Any, values: type) -> dict[str, Any] | None:
    """Option ``text`` as a JSON object whose values are all ``values``: {} when not given,
    None when it is not one."""
    if text is None or not str(text).strip():
        return {}
    try:
        given = json.loads(str(text))
    except ValueError:
        return None
    ok = isinstance(given, dict) and all(isinstance(v, values) for v in given.values())
    return given if ok else None


def _json_fields(topic: str, text: Any) -> tuple[tuple[str, str], ...]:
    """The checked ``jsonFields`` option (empty when not given)."""
    given = _json_object(text, str)
    if given is None:
        raise SourceError(f"sqe-kafka {topic}: jsonFields must be a JSON object of field names "
                          f'and types such as {{"id": "string"}}, got {text!r}')
    if not given:
        return ()
    problem = fields_problem(given)
    if problem is not None:
        raise SourceError(f"sqe-kafka {topic}: jsonFields {problem}: {text!r}")
    return arrow_fields(given) or ()


def _producers(topic: str, text: Any) -> dict[str, dict[str, Any]]:
    """The checked ``producersAhead`` option (empty when not given); its values may hold
    secrets, so a problem names the option, not what it holds."""
    given = _json_object(text, dict)
    if given is None:
        raise SourceError(f"sqe-kafka {topic}: producersAhead must be a JSON object of "
                          "producer settings by role, such as "
                          '{"Kafka state out": {"bootstrap.servers": "host:9092"}}')
    return given


def _value_format(topic: str, stream: StreamSettings, options: Mapping[str, Any]
                  ) -> ReaderSchema | None:
    """The checked ``valueFormat`` and its reader schema: ``valueSchema``'s text, else the
    stream's schema file or registry subject (:func:`~sqe.config.record_schemas.reader_schema`)."""
    kind = str(options.get("valueformat") or "").strip().lower()
    if not kind:
        return None
    if kind not in RECORD_FORMATS:
        raise SourceError(f"sqe-kafka {topic}: valueFormat must be one of "
                          f"{', '.join(RECORD_FORMATS)}, got {kind!r}")
    where = f"sqe-kafka {topic}"
    try:
        text = str(options.get("valueschema") or "").strip()
        if not text:
            return reader_schema(kind, topic, stream, where)
        imports = json.loads(str(options.get("valueimports") or "{}"))
        schema = ReaderSchema(kind, text, f"{where}: valueSchema",
                              tuple(sorted(stream.schema_registry.items())),
                              str(options.get("valuemessage") or "") or None,
                              tuple(imports.items()))
        _ = schema.struct
        return schema
    except (SchemaError, ValueError, AttributeError) as exc:
        raise SourceError(str(exc) if isinstance(exc, SchemaError) else
                          f"{where}: valueImports must be a JSON object of import name to "
                          f"schema text ({exc})") from None


@dataclass(frozen=True)
class SourceConfig:
    """The validated options of one ``sqe-kafka`` source (see the module docstring)."""

    topic: str
    stream: StreamSettings
    hwm_consumer: str | None = None
    emit_tally: bool = False
    ending: str | None = None  # endingOffsets: where a batch read ends (Spark's JSON)
    #: jsonFields: (name, type) of the JSON fields read in the reader, in order
    json_fields: tuple[tuple[str, str], ...] = ()
    #: producersAhead: the producers (role -> settings) the stream's states write with, which
    #: each worker makes at its first read (:func:`sqe.clients.producers.make_ahead`)
    producers_ahead: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)
    #: reportRead: each task reports what it read (:mod:`sqe.source.read_report`)
    report_read: bool = False
    #: valueFormat (and valueSchema): the values are records of this reader schema, decoded in
    #: the reader (:mod:`sqe.source.values`)
    value_format: ReaderSchema | None = None
    #: capFirstBatch: the query is not AvailableNow (:mod:`sqe.source.admission`)
    cap_first: bool = False

    def __post_init__(self) -> None:
        if self.stream.filter_replays and not self.hwm_consumer:
            raise SourceError(f"sqe-kafka {self.topic}: filterReplays needs the option "
                              "hwmConsumer (the consumer whose high-water marks filter replays, "
                              "<topology>.<stream>)")
        for name, policy in (("corruptChunkPolicy", self.stream.corrupt_policy),
                             ("badRecordPolicy", self.stream.bad_record_policy)):
            if policy == "deadletter" and not self.stream.dead_letter_topic:
                raise SourceError(f"sqe-kafka {self.topic}: {name} deadletter needs the "
                                  "option deadLetterTopic")
        _ = self.post_filter  # a bad post-filter fails here, not on an executor
        if self.stream.include_headers and self.stream.chunks:
            raise SourceError(f"sqe-kafka {self.topic}: includeHeaders reads each record's "
                              "headers; a chunk's messages have none of their own "
                              "(jw.sqe.spout.kafka.chunks)")
        if self.value_format is not None and self.stream.chunks:
            raise SourceError(f"sqe-kafka {self.topic}: valueFormat {self.value_format.kind} "
                              "reads plain records; chunks (jw.sqe.spout.kafka.chunks) hold "
                              "SQE's own messages")

    @property
    def offsets_topic(self) -> str | None:
        """The topic its offsets are kept under (with ``reportRead``), or None: by partition."""
        return self.topic if self.report_read else None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SourceConfig:
        """Validate reader options; a problem is a :class:`SourceError` naming the option."""
        lowered = {str(k).lower(): v for k, v in options.items()}
        topic = str(lowered.get("topic", "")).strip()
        if not topic:
            raise SourceError("sqe-kafka needs the option topic")
        given = {_option_key(k): v for k, v in lowered.items() if k not in _OWN}
        try:
            settings = Settings.defaults().overlay(given, f"sqe-kafka {topic} options")
        except OptionError as exc:
            raise SourceError(str(exc)) from None
        stream = StreamSettings(settings)
        if stream.format != "python":
            raise SourceError(f"sqe-kafka {topic}: jw.sqe.spout.kafka.format native is Spark's "
                              "own connector, not this source")
        consumer = str(lowered.get("hwmconsumer") or "").strip() or None
        ending = str(lowered.get("endingoffsets") or "").strip() or None
        if ending is not None:
            try:
                parse_offsets(ending)
            except (ValueError, AttributeError):
                raise SourceError(f"sqe-kafka {topic}: endingOffsets must be JSON offsets "
                                  f'such as {{"0": 42}}, got {ending!r}') from None
        return cls(topic, stream, consumer, _flag(lowered, "emittally"), ending,
                   _json_fields(topic, lowered.get("jsonfields")),
                   _producers(topic, lowered.get("producersahead")),
                   _flag(lowered, "reportread"), _value_format(topic, stream, lowered),
                   _flag(lowered, "capfirstbatch"))

    def to_options(self) -> dict[str, str]:
        """The reader options that rebuild this config (what the runner passes to Spark)."""
        s = self.stream.settings
        out = {"topic": self.topic, "emitTally": "true" if self.emit_tally else "false"}
        if self.report_read:
            out["reportRead"] = "true"
        if self.hwm_consumer:
            out["hwmConsumer"] = self.hwm_consumer
        if self.ending:
            out["endingOffsets"] = self.ending
        if self.json_fields:
            out["jsonFields"] = json.dumps(dict(self.json_fields))
        if self.value_format is not None:
            out["valueFormat"] = self.value_format.kind
            out["valueSchema"] = self.value_format.text
            if self.value_format.message:
                out["valueMessage"] = self.value_format.message
            if self.value_format.references:
                out["valueImports"] = json.dumps(dict(self.value_format.references))
        if self.cap_first:
            out["capFirstBatch"] = "true"
        if self.producers_ahead:
            out["producersAhead"] = json.dumps(self.producers_ahead, sort_keys=True, default=str)
        out.update({key: s.text(key) for key in sorted(s.explicit())
                    if key.startswith((OPTION_PREFIX, SCHEMA_PREFIX))})
        return out

    @cached_property
    def post_filter(self) -> Node | None:
        """The post-filter compiled to Arrow compute steps, or ``None``."""
        expr = self.stream.post_filter
        if expr is None:
            return None
        try:
            return compile_filter(expr, RECORD_COLUMNS, "sqe-kafka option postFilter")
        except TopologyError as exc:
            raise SourceError(str(exc)) from None

    def consumer_settings(self, role: str) -> dict[str, Any]:
        """The settings of this source's consumer for ``role`` (named in its group id)."""
        return consumer_conf(self.stream.bootstrap, f"sqe-{role}-{self.topic}",
                             self.stream.consumer_properties, quiet=role == "planner")

    def consumer(self, role: str) -> Any:
        """A confluent-kafka consumer for this source (``role`` names it in the group id)."""
        return new_consumer(self.consumer_settings(role), f"Kafka source {self.topic} {role}")


@dataclass
class RangePartition(InputPartition):
    """One Kafka partition's offset range of a micro-batch."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.partition, self.start, self.end))


@dataclass
class RangeGroup(InputPartition):
    """The offset ranges one task of a micro-batch reads, one after the other (several Kafka
    partitions' small ranges make one task: each task costs Spark and its Python worker about
    as much as reading thousands of records)."""

    ranges: tuple[RangePartition, ...]

    def __post_init__(self) -> None:
        InputPartition.__init__(self, tuple((r.partition, r.start, r.end) for r in self.ranges))


def group_ranges(ranges: list[RangePartition], least: int) -> list[RangeGroup]:
    """``ranges`` in order, packed into groups of at least ``least`` offsets each (a range
    is never split; a last group smaller than that joins the one before): a batch of small
    ranges runs as few tasks, one of large ranges as one task per Kafka partition.

    >>> r = [RangePartition("t", p, 0, n) for p, n in enumerate([500, 700, 30_000, 200])]
    >>> [[x.partition for x in g.ranges] for g in group_ranges(r, 10_000)]
    [[0, 1, 2, 3]]
    >>> [[x.partition for x in g.ranges] for g in group_ranges(r, 1)]
    [[0], [1], [2], [3]]
    >>> [[x.partition for x in g.ranges] for g in group_ranges(r, 1_000)]
    [[0, 1], [2, 3]]
    """
    groups: list[list[RangePartition]] = []
    size = least
    for r in ranges:
        if size >= least:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += r.end - r.start
    if len(groups) > 1 and size < least:
        groups[-2].extend(groups.pop())
    return [RangeGroup(tuple(g)) for g in groups]
