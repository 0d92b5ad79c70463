"""The Kafka state: a query's output written to a topic from the executors.

Each Spark task produces its rows with an idempotent confluent-kafka producer
(order per partition holds), flushes before it reports success and fails on
the first delivery error, so nothing is dropped silently: Spark retries the
task or the batch, and the records the failed attempt already wrote are
replays that the next hop's HWM filter drops.

Keys (``jw.sqe.state.kafka.keytype``):

* ``streammetadata``: the record's carried StreamMetadata (this topology's
  stream pid, source partition, source offset) as the 20-byte key.  Rows keep
  their source order per Spark partition, which is the order they are sent in.
* ``messagehash``: Spark's 64-bit ``xxhash64`` of the value bytes, 8 bytes
  big-endian: a stable hash, the same on every machine and run.
* ``field``: the first field is the key and the second the value (as SQE).

Values: the single field when ``fields`` has one entry (bytes as they are,
strings as UTF-8, anything else as its string form), else a JSON object of
the fields.  ``jw.sqe.state.kafka.partitionClass`` picks the partition
(vectorised over a whole Arrow batch); without it the producer's
``murmur2_random`` partitioner places keys as Kafka's Java client does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from sqe.compiler import CARRIED, field_column
from sqe.errors import StateError
from sqe.faults import armed, fault_point
from sqe.kafka_client import error_text, producer_conf, topic_partitions
from sqe.metadata import encode_keys

__all__ = ["KafkaStateConfig", "write_kafka"]

_FLUSH_TIMEOUT = 120.0


@dataclass(frozen=True)
class KafkaStateConfig:
    """Where and how one query writes to Kafka."""

    topic: str
    brokers: str
    keytype: str
    fields: tuple[str, ...]
    partitioner: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        keytype = self.keytype.lower()
        if keytype not in ("streammetadata", "messagehash", "field"):
            raise StateError(f"Kafka state {self.topic}: keytype must be StreamMetadata, "
                             f"messagehash or field, got {self.keytype!r}")
        if keytype == "field" and len(self.fields) != 2:
            raise StateError(f"Kafka state {self.topic}: keytype field writes the first field "
                             f"as key and the second as value, so it needs exactly 2 fields, "
                             f"got {len(self.fields)}")
        object.__setattr__(self, "keytype", keytype)

    @classmethod
    def from_settings(cls, topic: str, fields: list[str], settings: Mapping[str, Any],
                      extra: Mapping[str, Any] | None = None) -> KafkaStateConfig:
        """The config of a query's state from its resolved ``jw.sqe.state.kafka.*`` options."""
        return cls(
            topic=topic,
            brokers=",".join(settings["jw.sqe.state.kafka.brokers"]),
            keytype=settings["jw.sqe.state.kafka.keytype"],
            fields=tuple(fields),
            partitioner=settings["jw.sqe.state.kafka.partitionClass"],
            extra=tuple(sorted((extra or {}).items())),
        )


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
    if cfg.keytype == "field":
        key, value = _as_bytes(df, cfg.fields[0]), _as_bytes(df, cfg.fields[1])
    else:
        if len(cfg.fields) == 1:
            value = _as_bytes(df, cfg.fields[0])
        else:
            value = F.to_json(F.struct(*[field_column(f) for f in cfg.fields])).cast("binary")
        key = F.xxhash64(value) if cfg.keytype == "messagehash" else F.lit(None).cast("binary")
    carried = [c for c in CARRIED if c in df.columns]
    if cfg.keytype == "streammetadata" and len(carried) != len(CARRIED):
        raise StateError(f"Kafka state {cfg.topic}: keytype StreamMetadata needs the carried "
                         "StreamMetadata of each record, and this query's input has none")
    return df.select(key.alias("_k"), value.alias("_v"), *carried)


def _keys(batch: pa.RecordBatch, keytype: str) -> pa.Array:
    if keytype == "streammetadata":
        cols = [batch.column(c).to_numpy(zero_copy_only=False) for c in CARRIED]
        return encode_keys(*cols)
    if keytype == "messagehash":
        hashes = batch.column("_k").to_numpy(zero_copy_only=False).astype(">i8")
        fixed = pa.Array.from_buffers(pa.binary(8), len(hashes),
                                      [None, pa.py_buffer(hashes.tobytes())])
        return fixed.cast(pa.binary())
    return batch.column("_k")


def _sliced(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            yield batch.slice(start, size)


def _producer_task(cfg: KafkaStateConfig) -> Any:
    """The function each Spark task runs: produce its rows, flush, yield the count written."""

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaException, Producer

        from partitioners import resolve

        conf = producer_conf(cfg.brokers, dict(cfg.extra))
        conf.setdefault("partitioner", "murmur2_random")
        producer = Producer(conf)
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None and len(failures) < 5:
                failures.append(f"{msg.topic()}/{msg.partition()}: {error_text(err)}")

        n_partitions = len(topic_partitions(producer, cfg.topic, cfg.brokers, StateError,
                                            "Kafka state"))
        partitioner = resolve(cfg.partitioner) if cfg.partitioner else None
        written = 0
        fault_at = armed("kafka-state-sent")
        if fault_at:  # a crash test stops this task after fault_at records reached Kafka
            batches = _sliced(batches, fault_at)
        for batch in batches:
            keys = _keys(batch, cfg.keytype)
            if partitioner is not None:
                try:
                    targets = partitioner.partition_array(keys, n_partitions).tolist()
                except ValueError as exc:
                    raise StateError(f"Kafka state {cfg.topic}: partitioner "
                                     f"{cfg.partitioner}: {exc}") from None
            else:
                targets = [-1] * batch.num_rows  # RD_KAFKA_PARTITION_UA: the producer decides
            for key, value, target in zip(keys.to_pylist(), batch.column("_v").to_pylist(),
                                          targets, strict=True):
                while True:
                    try:
                        producer.produce(cfg.topic, value=value, key=key, partition=target,
                                         on_delivery=on_delivery)
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        producer.poll(0.1)
                    except KafkaException as exc:  # refused before sending (e.g. too large)
                        producer.flush(_FLUSH_TIMEOUT)
                        raise StateError(
                            f"Kafka state {cfg.topic} on {cfg.brokers}: a record was refused "
                            f"({error_text(exc)}); the batch fails and nothing of it is "
                            "committed") from None
            producer.poll(0)
            if failures:
                break
            written += batch.num_rows
            if fault_at is not None:
                producer.flush(_FLUSH_TIMEOUT)
                fault_point("kafka-state-sent", written)
        remaining = producer.flush(_FLUSH_TIMEOUT)
        if failures or remaining:
            what = "; ".join(failures) if failures else (
                f"{remaining} record(s) not acknowledged within {_FLUSH_TIMEOUT:.0f} s")
            raise StateError(f"Kafka state {cfg.topic} on {cfg.brokers}: delivery failed "
                             f"({what}); the batch fails and its retry is filtered downstream "
                             "as replays")
        yield pa.RecordBatch.from_pydict({"written": [written]})

    return produce


def write_kafka(df: DataFrame, cfg: KafkaStateConfig) -> int:
    """Write ``df`` to Kafka from the executors; returns the number of records written."""
    prepared = _prepare(df, cfg)
    result = prepared.mapInArrow(_producer_task(cfg), "written long").agg(F.sum("written"))
    total = result.first()[0]
    return int(total or 0)

