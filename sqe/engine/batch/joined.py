"""The other hops a hop's query reads (a stream-stream join): admitted with its batch, committed
after it.

A query may join the streams of two hops (:meth:`sqe.Hop.exactly_once` with ``also=[other]``).
Spark keeps one checkpoint for it, with a line of offsets per source (each hop's under its topic,
:mod:`sqe.engine.spark.checkpoint`), and runs one batch over both.  The batch's states are the first
hop's: its commit carries their staged rows, its marks and the batch id
(:func:`~sqe.engine.batch.commit.commit_hwm`).  Each other hop's consumer is admitted with the
batch (a store behind what this run saw, or a batch another writer committed with other offsets,
stops it before anything is read) and commits its marks and the same batch id after the first
hop's commit, from what its source tasks read (:mod:`sqe.engine.batch.source_reads`).

A driver that dies between the two commits leaves the first hop's stores holding the batch and
the other's not.  Spark runs the batch again: the first hop's stores hold it, so it is run
through writing nothing (Spark's state store computes it again), and the other hop commits
then.  Its tasks find what they read the first time and filter by the marks they recorded
(:mod:`sqe.source.read_report`), so the batch passes the same records as the first time, and
the next batch, read only after that commit, drops every replay of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqe.engine.batch.commit import commit_hwm
from sqe.engine.batch.one_pass_batch import count_source
from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.batch.source_reads import SourceReads
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.errors import SourceError, StateError
from sqe.faults import fault_point
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import answered
from sqe.observe.batch_report import BatchReport
from state.sink import Batch

__all__ = ["JoinedHop"]


@dataclass
class JoinedHop:
    """Another hop read by the query: its stream, its line of the query's ``checkpoint`` (None
    in the ``sqe-hop`` sink's commit, whose tasks list what they read) and the id the stores
    count the query's batch 0 as (the first hop's too)."""

    pipeline: StreamPipeline
    checkpoint: StreamCheckpoint | None
    base: int
    #: the last batch this consumer saw committed to its HWM store (StoreBehind below it)
    seen: int | None = None
    _store: HwmStore | None = field(default=None, repr=False)

    @property
    def consumer(self) -> str:
        """The hop's consumer (``<topology>.<stream>``)."""
        return self.pipeline.consumer

    def admit(self, spark_batch: int) -> bool:
        """Whether Spark's batch ``spark_batch`` is still to be committed for this consumer
        (False: its HWM store holds it); refusals are raised (:meth:`HwmStore.admit`)."""
        store = self._hwm()
        offsets = self.checkpoint.end_offsets(spark_batch) if self.checkpoint else None
        batch_id = self.base + spark_batch
        try:
            todo = answered(store, lambda: store.admit(batch_id, offsets, self.seen),
                            f"batch {batch_id} of {self.consumer}", "its admission",
                            f"cannot read the HWM store of {self.consumer}")
        except BaseException:
            self.close()
            raise
        if not todo:
            self.seen = batch_id
        return bool(todo)

    def commit(self, spark_batch: int, report: BatchReport | None = None,
               query: str | None = None) -> None:
        """Commit this consumer's marks of Spark's batch ``spark_batch`` (after the first hop's
        commit of it), counting what its tasks read into ``report``; ``query``: the streaming
        query, whose tasks listed what they read (the sink's commit)."""
        batch_id = self.base + spark_batch
        ck = self.checkpoint
        if ck is None and query is None:  # nothing says which ranges the batch read
            raise StateError(f"{self.consumer} batch {batch_id}: no task of the batch said "
                             "what it read, so its marks cannot be committed; it is run again")
        store = self._hwm()
        reads = SourceReads(self.pipeline, ck, self.base)
        try:
            read = reads.batch(store, batch_id, query)
            batch = Batch(self.consumer, batch_id, store,
                          ck.end_offsets(spark_batch) if ck else None,
                          ck.location if ck else query, seen=self.seen)
            fault_point("joined-before-commit", batch_id)
            commit_hwm(batch, read.marks)
        except BaseException:
            self.close()
            raise
        self.seen = batch_id
        if report is not None:
            count_source(read, report)
        reads.forget_before(store, batch_id, query)

    def close(self) -> None:
        """Close the HWM store's client (the next batch makes a new one)."""
        if self._store is not None:
            self._store.client.close()
            self._store = None

    def _hwm(self) -> HwmStore:
        if self._store is None:
            store = self.pipeline.stores.hwm_store()
            if store is None:  # Hop.exactly_once takes only hops that filter replays
                raise SourceError(f"{self.consumer}: a joined hop filters replays")
            self._store = store
        return self._store
