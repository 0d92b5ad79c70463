"""Where the ``sqe-kafka`` source's micro-batches begin and end, partition by partition.

Offsets are JSON ``{"<partition>": <next offset>}``, or ``{"<topic>": {...}}`` for a source
that reports its reads (:func:`offsets_json`).  A batch
reads at most ``maxRecordsPerBatch`` records, shared by backlog (:func:`limit_offsets`).
A partition the topic gained since the last batch starts at its earliest offset; a
partition that is gone, or one that now ends before the offset the stream stands at, means
the topic was deleted and created again or its records removed: :func:`moved_partitions`
says so in one sentence, so the stream stops instead of waiting for offsets that will
never come or skipping records.  A range that stops delivering before its end is said by
:func:`undelivered`: the broker's log may end there now (acknowledged records lost).

Example::

    >>> limit_offsets({0: 0, 1: 0}, {0: 300, 1: 100}, 100)
    {0: 75, 1: 25}
    >>> moved_partitions("events", {0: 10}, {0: (0, 25)}) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from sqe.source.kafka.config import (
    RangeGroup,
    RangePartition,
    SourceConfig,
    by_partition,
    group_ranges,
)

__all__ = ["limit_offsets", "moved_partitions", "offsets_json", "plan_ranges", "undelivered"]


def offsets_json(offsets: Mapping[int, int], topic: str | None = None) -> dict[str, Any]:
    """Offsets as Spark keeps them: ``{"<partition>": <next offset>}``, by partition, under
    ``topic`` when given (a hop's source: its query may read two topics)."""
    flat = {str(p): int(o) for p, o in sorted(offsets.items())}
    return flat if topic is None else {topic: flat}


def limit_offsets(start: Mapping[int, int], latest: Mapping[int, int],
                  max_records: int | None) -> dict[int, int]:
    """End offsets that read at most ``max_records`` records in all, shared by backlog.

    Each partition gets a share of the limit proportional to its backlog
    (floored), and what flooring leaves goes to the largest backlogs, so the
    total is exactly ``min(max_records, total backlog)``.
    """
    backlog = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return dict(latest)
    share = {p: backlog[p] * max_records // total for p in backlog}
    left = max_records - sum(share.values())
    for p in sorted(backlog, key=lambda p: (-(backlog[p] - share[p]), p)):
        if left == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            left -= 1
    return {p: start.get(p, latest[p]) + share[p] for p in latest}


def moved_partitions(topic: str, begin: Mapping[int, int],
                     marks: Mapping[int, tuple[int, int]]) -> str | None:
    """Why the partitions of ``topic`` (``marks``: low and high watermark each) cannot continue
    from ``begin``, where the stream stands (a partition gone, or one that ends before that
    offset: the topic was deleted and created again, or its log cut), or None when they can."""
    gone = sorted(set(begin) - set(marks))
    behind = sorted(p for p, o in begin.items() if p in marks and 0 <= marks[p][1] < o)
    if not gone and not behind:
        return None
    if gone:
        what = (f"partition{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))}, which "
                f"this stream has read, {'are' if len(gone) > 1 else 'is'} gone (the topic has "
                f"{len(marks)} partition{'s' if len(marks) != 1 else ''} now)")
    else:
        p = behind[0]
        what = (f"partition {p} ends at offset {marks[p][1]}, before offset {begin[p]} where "
                "this stream's checkpoint stands")
    return (f"Kafka source {topic}: {what}, so the topic was deleted and created again or its "
            "records were removed, and the checkpoint's offsets no longer name its records; "
            "to read the topic as it is now from its start, run `sqe reset` for this "
            "topology's stream and start it on a new, empty checkpoint")


def plan_ranges(cfg: SourceConfig, start: Mapping[Any, Any], end: Mapping[Any, Any]
                ) -> list[RangeGroup]:
    """The ranges ``[start, end)`` (offsets by partition) of the Kafka partitions with
    records, as few input partitions (tasks) as hold ``minRecordsPerTask`` records each."""
    begin, stop = by_partition(start), by_partition(end)
    ranges = [RangePartition(cfg.topic, p, begin.get(p, 0), e)
              for p, e in sorted(stop.items()) if e > begin.get(p, 0)]
    return group_ranges(ranges, cfg.stream.min_records_per_task)


def undelivered(consumer: Any, part: Any, position: int, stream: Any) -> str:
    """Why ``part`` stopped delivering at ``position``, before its planned end: the broker's
    log may end there now (records it had acknowledged, lost: a broker restarted without
    them, an unclean leader election), or it does not answer."""
    where = f"reading {part.topic}/{part.partition}"
    try:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(part.topic, part.partition), timeout=10)
    except KafkaException:
        high = None
    if high is not None and high <= position:
        return (f"{where}: the partition ends at offset {high} now, before {part.end}, the end "
                "this batch was planned to read when the broker had those records: the broker "
                f"lost records {high}..{part.end - 1} it had acknowledged (a broker restarted "
                "without them, or an unclean leader election); nothing of this batch was "
                f"committed, and it reads offsets {high}..{part.end - 1} once the partition "
                "holds them again")
    return (f"{where}: offsets {position}..{part.end} were not delivered within "
            f"{stream.read_timeout} s (brokers {stream.bootstrap}); nothing of this batch "
            "was committed")
