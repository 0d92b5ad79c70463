"""A hop's batch counted by what its source tasks read, not by the rows its query returns.

A hop's source reports each task's marks and counters to the HWM store
(:mod:`sqe.source.read_report`); :class:`SourceReads` reads them back for the batch's commit --
in a ``foreachBatch``, those of every range the checkpoint's offsets say the batch read (one
not reported fails the batch); in the ``sqe-hop`` sink's commit, those its tasks listed -- and
deletes the batch before's once this one is committed.  So a
windowed aggregation, a deduplication or a join can stand between the read and the states:
the marks are the source's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.errors import SourceError
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import answered
from sqe.source.kafka.offsets import plan_ranges
from sqe.source.read_report import BatchRead, batch_key, batch_read, range_key

__all__ = ["SourceReads", "reports_reads"]

log = logging.getLogger("sqe")
T = TypeVar("T")


def reports_reads(p: StreamPipeline) -> bool:
    """Whether stream ``p``'s source reports what its tasks read."""
    return p.source is not None and p.source.report_read and p.filtering


@dataclass(frozen=True)
class SourceReads:
    """What the source tasks of a hop's batches read (see the module docstring);
    ``checkpoint`` and ``base``: the streaming query's, where the batches' ranges are known."""

    pipeline: StreamPipeline
    checkpoint: StreamCheckpoint | None = None
    base: int = 0

    def batch(self, store: HwmStore, batch_id: int, query: str | None = None) -> BatchRead:
        """What the tasks of batch ``batch_id`` (as the stores count it) read: the ranges its
        checkpoint's offsets name, or (``query``: the streaming query, in a sink's commit,
        whose tasks know their batch) the ranges its tasks listed."""
        where = f"{self.pipeline.consumer} batch {batch_id}"
        keys = self._keys(store, batch_id - self.base, query, where)
        values = self._ask(store, where, "reading what its source tasks read",
                           lambda: store.client.mget(keys) if keys else [])
        return batch_read(dict(zip(keys, values, strict=True)), where)

    def forget_before(self, store: HwmStore, batch_id: int, query: str | None = None) -> None:
        """Delete what the batch before ``batch_id`` read (Spark finished it: it began this
        one), once ``batch_id`` is committed; a failure is a warning (the keys expire with the
        marks' TTL)."""
        where = f"{self.pipeline.consumer} batch {batch_id - 1}"
        try:
            keys = self._keys(store, batch_id - self.base - 1, query, where)
            # a foreachBatch's classic tasks list theirs too
            listed = query or (self.checkpoint.query_id() if self.checkpoint else None)
            if listed is not None:
                keys.append(batch_key(self.pipeline.consumer, listed, batch_id - self.base - 1))
            if keys:
                self._ask(store, where, "deleting what its source tasks read",
                          lambda: store.client.delete(*keys))
        except SourceError as exc:
            log.warning(f"warning: {exc}; the keys expire with the marks' TTL")

    def _keys(self, store: HwmStore, spark_batch: int, query: str | None, where: str
              ) -> list[str]:
        p = self.pipeline
        if query is not None:
            listed = batch_key(p.consumer, query, spark_batch)
            names = self._ask(store, where, "reading what its source tasks read",
                              lambda: store.client.smembers(listed))
            return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)
        span = self.checkpoint.batch_range(spark_batch) if self.checkpoint else None
        if span is None or p.source is None:
            return []
        start, end = (json.loads(text) for text in span)
        return [range_key(p.consumer, r.topic, r.partition, r.start, r.end)
                for group in plan_ranges(p.source, start, end) for r in group.ranges]

    @staticmethod
    def _ask(store: HwmStore, where: str, action: str, call: Callable[[], T]) -> T:
        return answered(store, call, where, action, f"{where}: {action} failed")
