"""A consumer's high-water marks read again from its topic: for ``sqe hwm rebuild``.

The mark of a (pid, source partition) is the highest source offset among the records of that
pair the consumer has read.  An HWM store that lost its marks (restarted empty, restored from
an older snapshot) can have them back from the topic itself: :func:`scan_marks` reads the
record keys of every partition from its first retained offset up to where the checkpoint's
last finished batch ended, and keeps the highest offset per pair.  A chunk's key is the
StreamMetadata of its last message, the highest of the chunk, so chunked topics scan the same
way; records without a StreamMetadata key name no pair.  Records that retention deleted are
not seen: a pair whose records are all gone gets no mark (nor would a replay of them, which
retention deleted upstream too, come back from this topic).

Example::

    >>> marks, read = scan_marks(source, {0: 1200, 1: 1190})    # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
from confluent_kafka import TopicPartition

from sqe.errors import SourceError
from sqe.source.kafka.config import SourceConfig
from sqe.source.kafka.source import KafkaStreamReader
from sqe.source.replay import beyond_bound, judgeable, pair_groups
from sqe.wire.keys import StreamMetadata, decode_keys

__all__ = ["fold_marks", "fold_marks_reference", "scan_marks"]

Pair = tuple[int, int]


def fold_marks(marks: dict[Pair, int], keys: Sequence[bytes | None], bound: int) -> int:
    """Raise ``marks`` to the highest offset each pair has among ``keys`` (record keys; those
    that are not StreamMetadata are passed over), at once (a loop over distinct pairs only).
    A key more than ``bound`` above its pair's mark moves nothing, as the replay filter
    refuses it (maxAdvance): the number of such keys."""
    pid, part, offset, valid = decode_keys(pa.array(keys, pa.binary()))
    judged = judgeable(part, offset, valid)
    beyond = beyond_bound(pid, part, offset, judged, marks, bound)
    rows = judged & ~beyond
    if rows.any():
        pairs, index = pair_groups(pid[rows], part[rows])
        best = np.full(len(pairs), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(best, index, offset[rows])
        for (p, q), o in zip(pairs.tolist(), best.tolist(), strict=True):
            if o > marks.get((p, q), o - 1):
                marks[(p, q)] = o
    return int(beyond.sum())


def fold_marks_reference(marks: dict[Pair, int], keys: Sequence[bytes | None], bound: int
                         ) -> int:
    """:func:`fold_marks` key by key (the bound against the marks before ``keys``), for
    tests."""
    start, skipped = dict(marks), 0
    for key in keys:
        if key is None or len(key) != 20:
            continue
        k = StreamMetadata.from_bytes(key)
        if k.partition < 0 or k.offset < 0:
            continue
        if k.offset - start.get((k.pid, k.partition), -1) > bound:
            skipped += 1
        elif k.offset > marks.get((k.pid, k.partition), k.offset - 1):
            marks[(k.pid, k.partition)] = k.offset
    return skipped


def scan_marks(cfg: SourceConfig, ends: Mapping[int, int]) -> tuple[dict[Pair, int], int, int]:
    """The marks of topic ``cfg.topic``'s records below ``ends`` (partition -> the offset the
    batch ended at), how many records were read, and how many keys claimed an offset beyond
    maxAdvance (moving nothing).  Brokers that deliver nothing for the stream's
    ``readTimeoutSeconds`` are a :class:`~sqe.errors.SourceError`."""
    reader = KafkaStreamReader(cfg)
    consumer = cfg.consumer("hwm-rebuild")
    marks: dict[Pair, int] = {}
    read = skipped = 0
    try:
        lows = reader.watermarks_now()
        for partition, end in sorted(ends.items()):
            position = lows.get(partition, (0, 0))[0]
            consumer.assign([TopicPartition(cfg.topic, partition, position)])
            deadline = time.monotonic() + cfg.stream.read_timeout
            while position < end:
                messages = consumer.consume(num_messages=min(end - position, 10_000),
                                            timeout=1.0)
                failed = next((m.error() for m in messages if m.error() is not None), None)
                if failed is not None:
                    raise SourceError(f"Kafka source {cfg.topic}/{partition}: {failed}")
                keys = [m.key() for m in messages if m.offset() < end]
                skipped += fold_marks(marks, keys, cfg.stream.max_advance)
                read += len(keys)
                if messages:
                    position = max(position, messages[-1].offset() + 1)
                    deadline = time.monotonic() + cfg.stream.read_timeout
                else:  # offsets may have gaps (transaction markers, compaction)
                    now = consumer.position([TopicPartition(cfg.topic, partition)])[0].offset
                    position = max(position, now)
                    if position < end and time.monotonic() > deadline:
                        raise SourceError(
                            f"Kafka source {cfg.topic}/{partition}: nothing delivered from "
                            f"offset {position} (up to {end}) for {cfg.stream.read_timeout} s "
                            "(jw.sqe.spout.kafka.readTimeoutSeconds)")
    finally:
        consumer.close()
        reader.stop()
    return marks, read, skipped
