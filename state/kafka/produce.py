"""The executor side of the Kafka state (:mod:`state.kafka.sink`): the task that produces
a query's rows, with the executor process's producers.

Each Spark task produces its rows with an idempotent confluent-kafka producer (order per
partition holds), flushes before it reports success and fails on the first delivery error;
the producer is the process's own (:mod:`sqe.clients.producers`), made once, or ahead by the
stream's source read, and reused by every task and batch (a failed task's is purged and
dropped).  Keys, values, chunks and partitions are made as the sink's
docstring says, vectorised over each Arrow batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from partitioners import resolve
from sqe.clients.kafka import FLUSH_TIMEOUT, RefusedRecord, Sender, topic_partitions
from sqe.clients.producers import drop_sender, shared_sender
from sqe.config.worker_task import begin_task
from sqe.errors import StateError
from sqe.faults import armed, fault_point
from sqe.wire.arrays import binaries, counts_batch, to_numpy
from sqe.wire.chunk.pack import encode_chunks
from sqe.wire.columns import CARRIED
from sqe.wire.headers import FILTER_HEADER
from sqe.wire.keys import encode_keys
from state.kafka.record_values import RECORD_SERIALIZERS, encoder

if TYPE_CHECKING:
    from state.kafka.config import KafkaStateConfig

__all__ = ["producer_task", "records"]


def _keys(batch: pa.RecordBatch, keytype: str) -> pa.Array:
    if keytype == "streammetadata":
        cols = [to_numpy(batch.column(c)) for c in CARRIED]
        return encode_keys(*cols)
    if keytype == "messagehash":
        hashes = to_numpy(batch.column("_k")).astype(">i8")
        fixed = pa.Array.from_buffers(pa.binary(8), len(hashes),
                                      [None, pa.py_buffer(hashes.tobytes())])
        return fixed.cast(pa.binary())
    return batch.column("_k")


def _values(batch: pa.RecordBatch, cfg: KafkaStateConfig) -> pa.Array:
    """The values of the batch's rows: ``_v`` as it is, or its rows as records."""
    values = batch.column("_v")
    if cfg.serializer not in RECORD_SERIALIZERS:
        return values
    return encoder(cfg, values.type).encode(values)


def records(batches: Iterator[pa.RecordBatch], cfg: KafkaStateConfig
             ) -> Iterator[tuple[pa.Array, list, list | None]]:
    """Groups of (keys, values, filter values or None) to produce, from the task's rows.

    With chunking, all rows of the task are packed at once, so the chunks depend on
    the task's input range only (not on how Spark cut it into Arrow batches).
    """
    if not cfg.chunking:
        for batch in batches:
            fvs = batch.column("_fv").to_pylist() if "_fv" in batch.schema.names else None
            yield _keys(batch, cfg.keytype), _values(batch, cfg).to_pylist(), fvs
        return
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    table = table.combine_chunks()
    pid, part, off = (to_numpy(table.column(c)) for c in CARRIED)
    fv = (table.column("_fv").chunk(0) if "_fv" in table.column_names
          else pa.nulls(table.num_rows, pa.string()))
    values = table.to_batches()[0]
    chunks = encode_chunks(pid, part, off, fv, _values(values, cfg), cfg.chunk_messages,
                           cfg.chunk_bytes, cfg.filter_size, cfg.chunk_codec)
    yield binaries([c.key for c in chunks]), [c.data for c in chunks], None


def _sliced(groups: Iterator[tuple[pa.Array, list, list | None]], size: int
            ) -> Iterator[tuple[pa.Array, list, list | None]]:
    for keys, values, fvs in groups:
        for start in range(0, len(values), size):
            yield (keys.slice(start, size), values[start:start + size],
                   fvs[start:start + size] if fvs is not None else None)


def producer_task(cfg: KafkaStateConfig) -> Any:
    """The function each Spark task runs: produce its rows, flush, yield the count written."""

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        conf = cfg.producer_settings()
        sender = shared_sender(conf, cfg.role)
        try:
            yield from _produce(cfg, sender, batches)
        except BaseException:
            drop_sender(conf)  # what it may still hold must not reach the next task's flush
            raise

    return produce


def _produce(cfg: KafkaStateConfig, sender: Sender, batches: Iterator[pa.RecordBatch]
             ) -> Iterator[pa.RecordBatch]:
    """One task: produce its rows, flush, yield the count written."""
    now = len(topic_partitions(sender.producer, cfg.topic, cfg.brokers, StateError,
                               "Kafka state"))
    n_partitions = cfg.partitions or now
    if n_partitions > now:
        raise StateError(f"Kafka state {cfg.topic} on {cfg.brokers}: the topic has {now} "
                         f"partitions, fewer than the {n_partitions} this stream places records "
                         "over, so it was deleted and created again; its readers' offsets and "
                         "high-water marks no longer match it: start the topologies that read "
                         "it over, and this one once with --adopt-layout")
    partitioner = resolve(cfg.partitioner) if cfg.partitioner else None
    written = 0
    groups = records(batches, cfg)
    fault_at = armed("kafka-state-sent")
    if fault_at:  # a crash test stops this task after fault_at records reached Kafka
        groups = _sliced(groups, fault_at)
    for keys, values, fvs in groups:
        if partitioner is not None:
            try:
                targets = partitioner.partition_array(keys, n_partitions).tolist()
            except ValueError as exc:
                raise StateError(f"Kafka state {cfg.topic}: partitioner "
                                 f"{cfg.partitioner}: {exc}") from None
        else:
            targets = [-1] * len(values)  # RD_KAFKA_PARTITION_UA: the producer decides
        headers = ([None if f is None else [(FILTER_HEADER, f.encode("utf-8"))] for f in fvs]
                   if fvs is not None else None)
        try:
            sender.send_many(cfg.topic, values, keys.to_pylist(), targets, headers)
        except RefusedRecord as exc:
            raise StateError(
                f"Kafka state {cfg.topic} on {cfg.brokers}: a record was refused "
                f"({exc}); the batch fails and nothing of it is committed") from None
        sender.poll(0)
        if sender.failures:
            break
        written += len(values)
        if fault_at is not None:
            sender.flush(FLUSH_TIMEOUT)
            fault_point("kafka-state-sent", written)
    problem = sender.finish(FLUSH_TIMEOUT)
    if problem:
        raise StateError(f"Kafka state {cfg.topic} on {cfg.brokers}: delivery failed "
                         f"({problem}); the batch fails and its retry is filtered downstream "
                         "as replays")
    yield counts_batch(written=written, partitions=now)


