"""An HWM store that lost a consumer's marks given them back from its topic.

When the HWM store of a consumer lost commits (restarted empty, restored from an older
snapshot, a failover to a replica that was behind), the next run refuses to start: the replays
of the lost batches' records would pass the filter.  The marks are a function of what the
consumer read, and its checkpoint says where its last finished batch ended, so they can be read
again: :func:`find_lost_marks` reads the record keys of the stream's topic from the first offset
each partition retains up to that batch's end (:func:`~sqe.source.kafka.mark_scan.scan_marks`),
and :meth:`LostMarks.commit` commits them to the store as that batch, with its end offsets and
checkpoint, after deleting the reports of what source tasks read (:mod:`sqe.source.read_report`)
that a batch tried meanwhile left: they hold the marks of the store that had lost them.  The
next run starts as if nothing had been lost, but for what the store kept beside the marks: the
rows of Redis states staged there for those batches are gone (the Postgres and Kafka states hold
theirs).  ``sqe hwm rebuild`` does it for a topology's streams (:mod:`sqe.cli.rebuild`),
:meth:`sqe.Hop.rebuild_marks` for a hop.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqe.engine.batch.pipeline import StreamStores
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.ledger.commits import Commit
from sqe.ledger.leftovers import forget_reads
from sqe.observe.batch_report import partition_offsets
from sqe.source.kafka.config import SourceConfig
from sqe.source.kafka.mark_scan import scan_marks

__all__ = ["LostMarks", "find_lost_marks"]


@dataclass(frozen=True)
class LostMarks:
    """A consumer's marks read from its topic up to its checkpoint's last batch."""

    stores: StreamStores
    checkpoint: StreamCheckpoint
    batch: int  # the checkpoint's last finished batch, as the stores count it
    ended: str  # the source offsets it ended at (Spark's JSON)
    marks: dict[tuple[int, int], int]
    held: Commit | None  # what the HWM store holds of the consumer's last batch
    read: int  # records read to find them
    beyond: int  # keys beyond maxAdvance, which moved no mark

    def describe(self, topic: str) -> str:
        """What was found, in one sentence."""
        has = f"holds batch {self.held.batch_id}" if self.held is not None else "holds no batch"
        return (f"{self.stores.consumer}: its HWM store {has}, the checkpoint's last is batch "
                f"{self.batch} (ended at offsets {self.ended}); {self.read} records of {topic} "
                f"read up to it give {len(self.marks)} high-water mark(s)"
                + (f" ({self.beyond} keys beyond maxAdvance moved none)" if self.beyond else ""))

    def commit(self) -> str:
        """Commit the marks to the HWM store as the checkpoint's last batch; what was done
        (``committed batch N with M high-water mark(s)``)."""
        store = self.stores.hwm_store()
        assert store is not None  # a filtering stream's
        try:
            # a batch tried while the store held none of these marks left its tasks' reports
            # of the marks they filtered by, which a run of it again would take over the store's
            forget_reads(store.client, store.prefix)
            store.commit(self.batch, self.marks, offsets=self.ended,
                         checkpoint=self.checkpoint.location)
        finally:
            store.client.close()
        return f"committed batch {self.batch} with {len(self.marks)} high-water mark(s)"


def find_lost_marks(stores: StreamStores, source: SourceConfig, checkpoint: StreamCheckpoint
                    ) -> LostMarks | str:
    """The marks the HWM store of ``stores`` lost, read from ``source``'s topic up to the last
    batch of ``checkpoint``; or why there is nothing to rebuild, in one sentence."""
    batch, ended = checkpoint.last_batch() or (None, None)
    if batch is None or ended is None:
        return (f"{stores.consumer}: checkpoint {checkpoint.location} has no finished batch; "
                "nothing to rebuild")
    held = stores.hwm_commit()
    if held is not None and held.batch_id >= batch:
        return (f"{stores.consumer}: its HWM store holds batch {held.batch_id}, the "
                f"checkpoint's last is {batch}; nothing to rebuild")
    ends = {int(p): int(o) for p, o in partition_offsets(ended).items()}
    marks, read, beyond = scan_marks(source, ends)
    return LostMarks(stores, checkpoint, batch, ended, marks, held, read, beyond)
