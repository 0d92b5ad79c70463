"""How far a stream of the ``sqe-kafka`` source is behind its topic, per partition.

A partition's *end* is its high watermark (the offset the next record written
gets); what a run has *committed* is the end offset of its last finished batch
(Spark's checkpoint, or the batch report of the run); the *backlog* is what lies
between.  A stream with no finished batch yet counts from where it would start
(``startingOffsets``: earliest, latest or the given JSON).  ``sqe status`` and the
running ``sqe run`` (its live progress and ``--metrics-port`` gauges) read it.

Example::

    >>> lags = LagReader(source).lag({"0": 1200, "1": 1190})    # doctest: +SKIP
    >>> [(x.partition, x.end, x.committed, x.backlog) for x in lags]  # doctest: +SKIP
    [(0, 1500, 1200, 300), (1, 1190, 1190, 0)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqe.source.kafka import KafkaStreamReader
from sqe.source.kafka.config import SourceConfig

__all__ = ["LagReader", "PartitionLag", "total_backlog"]


@dataclass(frozen=True)
class PartitionLag:
    """One topic partition: its end offset, where the run has committed to, and the gap."""

    topic: str
    partition: int
    end: int  # the high watermark: the offset of the next record written
    committed: int | None  # the next offset the run reads; None: no batch finished yet
    start: int  # where a run with nothing committed starts (startingOffsets)

    @property
    def position(self) -> int:
        """The next offset the run reads."""
        return self.committed if self.committed is not None else self.start

    @property
    def backlog(self) -> int:
        """Records written and not yet read by a finished batch."""
        return max(0, self.end - self.position)

    def to_json(self) -> dict[str, int | str | None]:
        """The partition as ``sqe status --json`` prints it."""
        return {"topic": self.topic, "partition": self.partition, "end_offset": self.end,
                "committed_offset": self.committed, "backlog": self.backlog}


def total_backlog(lags: list[PartitionLag]) -> int:
    """The backlog of every partition together."""
    return sum(x.backlog for x in lags)


class LagReader:
    """Reads a stream's partition ends with one consumer, kept until :meth:`close`."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._reader = KafkaStreamReader(source)

    @property
    def topic(self) -> str:
        """The stream's topic."""
        return self.source.topic

    def lag(self, committed: Mapping[str, int] | None, timeout: float = 5.0
            ) -> list[PartitionLag]:
        """Every partition of the topic against ``committed``, the end offsets of a batch in
        Spark's checkpoint form (``{"<partition>": <next offset>}``, as
        :func:`~sqe.observe.batch_report.partition_offsets` reads them; None, or a partition
        missing from it: nothing committed there yet).  Brokers that do not answer in
        ``timeout`` seconds are a :class:`~sqe.errors.SourceError`."""
        marks = self._reader.watermarks_now(timeout)
        start = self._reader.starting(marks)
        done = committed or {}
        return [PartitionLag(self.topic, p, hi, done.get(str(p)), start[p])
                for p, (_, hi) in sorted(marks.items())]

    def close(self) -> None:
        """Close the consumer."""
        self._reader.stop()
