"""The Kafka state: a query's output written to a topic from the executors.

Each Spark task produces its rows with an idempotent confluent-kafka producer
(order per partition holds), flushes before it reports success and fails on
the first delivery error, so nothing is dropped silently: Spark retries the
task or the batch, and the records the failed attempt already wrote are
replays that the next hop's HWM filter drops.  The producer is the executor
process's own, made once and reused by every task and batch (a failed task's
is purged and dropped); it reports failed deliveries only
(:meth:`~sqe.clients.kafka.Sender.start`), so an acknowledged record
costs no Python call.

Keys (``jw.sqe.state.kafka.keytype``):

* ``streammetadata``: the record's carried StreamMetadata (this topology's
  stream pid, source partition, source offset) as the 20-byte key.  Rows keep
  their source order per Spark partition, which is the order they are sent in.
* ``messagehash``: Spark's 64-bit ``xxhash64`` of the value bytes, 8 bytes
  big-endian: a stable hash, the same on every machine and run.
* ``field``: the first field is the key and the second the value (as SQE).

Values (``jw.sqe.state.kafka.serializer``): ``json``, the single field when ``fields`` has
one entry (bytes as they are, strings as UTF-8, anything else as its string form), else a
JSON object of the fields; ``avro`` or ``protobuf``, a record (message) of the fields in the
Confluent wire format
(:mod:`state.kafka.record_values`).

Filter values and chunks: ``filterValue`` computes each message's filter value
(an SQE expression over the query's fields, compiled by the runner into the
column :data:`FILTER_VALUE_COLUMN`).  Without chunking it travels in the record
header ``sqe-filter-value``.  With
``chunking`` (keytype StreamMetadata), each task packs all its rows at once
into chunks (:func:`sqe.wire.chunk.pack.encode_chunks`: never across source
partitions, deterministic for the same input range, so a retried batch writes
the same chunks); a chunk's key is the StreamMetadata of its last message and
its Bloom filter holds the filter values of its messages.

``jw.sqe.state.kafka.partitionClass`` picks the partition
(vectorised over a whole Arrow batch) among the first
:attr:`KafkaStateConfig.partitions` of the topic: the count of its layout
(:mod:`state.kafka.layout`), kept when the topic gains partitions so that a
reader behind on the old ones loses nothing, and said once per run; without it
the producer's ``murmur2_random`` partitioner places keys as Kafka's Java client
does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from sqe.clients.kafka import (
    new_producer,
    producer_conf,
    topic_partitions,
)
from sqe.config.client_properties import property_problems
from sqe.errors import StateError
from sqe.lang.expressions import Expression
from sqe.ledger.hwm import HwmStore
from sqe.wire.columns import CARRIED, field_column
from state.kafka.config import KafkaStateConfig
from state.kafka.layout import KafkaLayout, canonical_partitioner, grown_topic
from state.kafka.produce import producer_task
from state.kafka.record_values import RECORD_SERIALIZERS, with_writer
from state.sink import RowTask, Sink, SinkTarget, task_counts

__all__ = ["FILTER_VALUE_COLUMN", "KafkaSink", "write_kafka"]

log = logging.getLogger("sqe")

#: The column that holds each message's filter value when the state has a ``filterValue``.
FILTER_VALUE_COLUMN = "_sqe_filter_value"


class KafkaSink(Sink):
    """A Kafka state: the batch's rows produced from the executors (see the module docstring).

    Nothing to commit: a retried batch writes its records again, and they are replays
    the next hop's HWM filter drops.
    """

    state_name = "KAFKA"

    def where(self) -> str:
        """The Kafka brokers of the state's topic."""
        return f"Kafka at {self.config.brokers}"

    def __init__(self, target: SinkTarget) -> None:
        super().__init__(target)
        self.config = KafkaStateConfig.of(target)
        self._told = 0  # the partition count last said to be more than the layout's

    def layout(self, partitions: int | None) -> KafkaLayout:
        """This state's layout with ``partitions`` as its count (dropped without a
        partitioner: then the producer places records over whatever the topic has)."""
        c = self.config
        return KafkaLayout(partitions if c.partitioner else None,
                           canonical_partitioner(c.partitioner), c.keytype, c.chunking)

    def producers(self) -> dict[str, dict[str, Any]]:
        """The producer every task of this state writes with."""
        return {self.config.role: self.config.producer_settings()}

    def topic_partitions(self) -> int:
        """How many partitions the topic has now (asked on the driver)."""
        c = self.config
        producer = new_producer(producer_conf(c.brokers, dict(c.extra)), c.role)
        try:
            return len(topic_partitions(producer, c.topic, c.brokers, StateError, "Kafka state"))
        finally:
            producer.flush(0)

    def route_over(self, partitions: int | None, told: int | None = None) -> None:
        """Place records over the first ``partitions`` of the topic from now on (``told``: the
        topic's partition count the run has said already)."""
        self.config = replace(self.config, partitions=partitions)
        self._told = told or 0

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        s, where = target.settings.kafka, target.where
        problems = []
        if not s.brokers:
            problems.append(f"{where}: a KAFKA state needs jw.sqe.state.kafka.brokers")
        if s.chunking and s.keytype != "streammetadata":
            problems.append(f"{where}: jw.sqe.state.kafka.chunking keys each chunk by the "
                            "StreamMetadata of its last message, so it needs keytype "
                            "StreamMetadata")
        problems += property_problems(s.settings, "producer", where)
        if s.keytype == "field" and len(target.fields) != 2:
            problems.append(f"{where} -> insertInto -> fields: keytype field writes the first "
                            f"field as key and the second as value, so it needs exactly 2 "
                            f"fields, got {len(target.fields)}")
        return problems

    def columns(self) -> dict[str, tuple[Expression, str]]:
        fv = self.target.settings.kafka.filter_value
        if fv is None:
            return {}
        return {FILTER_VALUE_COLUMN: (fv, "jw.sqe.state.kafka.filterValue")}

    def write(self, frame: DataFrame) -> int:
        self.config = with_writer(self.config, frame)
        return self._sent(*_send(frame, self.config))

    def pass_columns(self, frame: DataFrame, hwm: HwmStore | None) -> list[Column]:
        """The record's key (or its hash), value and carried StreamMetadata, and the filter
        value (:func:`_prepare_columns`)."""
        self.config = with_writer(self.config, frame)
        return _prepare_columns(frame, self.config)

    def pass_task(self, context: Mapping[str, Any]) -> RowTask:
        """Produce the rows, flush, count (the task of :meth:`write`)."""
        return producer_task(self.config)

    def pass_done(self, counts: Mapping[str, int], data: Sequence[bytes]) -> int:
        return self._sent(counts.get("written", 0), counts.get("partitions", 0))

    def _sent(self, written: int, now: int) -> int:
        """``written``, once a topic found to have ``now`` partitions, more than the layout's,
        is said (once per count)."""
        layout = self.config.partitions
        if layout is not None and now > layout and now != self._told:
            self._told = now
            log.warning(f"warning: {grown_topic(self.config.topic, layout, now)}")
        return written

    def write_empty(self, frame: DataFrame) -> int:
        return 0  # no record to send


def _as_bytes(df: DataFrame, name: str) -> Column:
    dtype = df.schema[name].dataType
    col = field_column(name)
    if isinstance(dtype, BinaryType):
        return col
    if isinstance(dtype, StringType):
        return col.cast("binary")
    return col.cast("string").cast("binary")


def _prepare(df: DataFrame, cfg: KafkaStateConfig) -> DataFrame:
    """Spark built-ins only: the ``_k`` (binary or long hash), ``_v`` and carried columns."""
    return df.select(*_prepare_columns(df, cfg))


def _prepare_columns(df: DataFrame, cfg: KafkaStateConfig) -> list[Column]:
    """The columns of :func:`_prepare` over ``df``'s fields."""
    names = cfg.value_fields  # keytype field: the second field (the first is the key)
    if cfg.serializer in RECORD_SERIALIZERS:  # a record of the fields, encoded by the task
        value = F.struct(*[field_column(f).alias(f) for f in names])
    elif len(names) == 1:
        value = _as_bytes(df, names[0])
    else:
        value = F.to_json(F.struct(*[field_column(f) for f in names])).cast("binary")
    key = (_as_bytes(df, cfg.fields[0]) if cfg.keytype == "field" else
           F.xxhash64(value) if cfg.keytype == "messagehash" else F.lit(None).cast("binary"))
    carried = [c for c in CARRIED if c in df.columns]
    if cfg.keytype == "streammetadata" and len(carried) != len(CARRIED):
        raise StateError(f"Kafka state {cfg.topic}: keytype StreamMetadata needs the carried "
                         "StreamMetadata of each record, and this query's input has none")
    extra = ([F.col(FILTER_VALUE_COLUMN).cast("string").alias("_fv")]
             if FILTER_VALUE_COLUMN in df.columns else [])
    return [key.alias("_k"), value.alias("_v"), *[F.col(c) for c in carried], *extra]


def _send(df: DataFrame, cfg: KafkaStateConfig) -> tuple[int, int]:
    """Write ``df`` to Kafka from the executors: the number of records written, and the most
    partitions a task found the topic to have (0 when no task ran)."""
    prepared = _prepare(df, cfg)
    counts = task_counts(prepared.mapInArrow(producer_task(cfg), "written long, partitions long"))
    done = counts.get(None, {})
    return done.get("written", 0), done.get("partitions", 0)


def write_kafka(df: DataFrame, cfg: KafkaStateConfig) -> int:
    """Write ``df`` to Kafka from the executors; returns the number of records written."""
    return _send(df, cfg)[0]

