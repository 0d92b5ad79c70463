"""The last step of a batch: its new high-water marks, its id and its staged rows committed to
the consumer's HWM store in one atomic step (:meth:`sqe.ledger.hwm.HwmStore.commit`), for both
ways a batch is written (:mod:`sqe.engine.per_batch`, :mod:`sqe.engine.one_pass_batch`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

from sqe.errors import StaleBatchError, StateError
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import Failed, asked, times_tried
from sqe.state.sink import Batch

__all__ = ["commit_hwm", "dropped"]

log = logging.getLogger("sqe")


def commit_hwm(batch: Batch, updates: Mapping[tuple[int, int], int]) -> None:
    """Commit ``batch`` (its marks ``updates``, its stages, offsets and checkpoint) to its HWM
    store; nothing without one.  A Redis error is a :class:`StateError`: the batch is re-run
    and its output filtered as replays.

    A connection that drops or times out (a reset, a reply lost after the script ran, a
    failover) is not the end of the run: the commit is sent again on a new connection for up
    to the store's ``commit_retry_s`` seconds, with a warning.  It is idempotent by batch id:
    a commit that did run the first time answers "already committed" the second, and the rows
    it recorded to apply are applied then.  Staged rows are on the store's replicas before the
    commit (each staging task waits for them), so a commit sent again to a promoted replica
    finds them."""
    store = batch.store
    if store is None:
        return

    def commit() -> None:
        store.commit(batch.batch_id, updates, batch.stages, batch.offsets, batch.checkpoint)

    try:
        _, tries = asked(store, commit, f"batch {batch.batch_id} of {batch.consumer}",
                         "the commit")
    except Failed as failed:
        raise _not_committed(batch, failed) from None
    if tries:
        try:  # what a commit that ran before its reply was lost recorded to apply
            store.finish_applying()
        except redis.RedisError as exc:
            log.warning("batch %d of %s is committed; applying its staged rows failed (%s), "
                        "and the next batch or run applies them first", batch.batch_id,
                        batch.consumer, store.describe_error(exc))
        log.warning("batch %d of %s: committed after %d failed attempt(s)", batch.batch_id,
                    batch.consumer, tries)


def _not_committed(batch: Batch, failed: Failed) -> StateError:
    """The sentence of a commit that failed."""
    return StateError(f"cannot commit the HWMs of {batch.consumer}: {failed}"
                      f"{times_tried(failed.tries)}; the batch "
                      "is re-run and its output filtered as replays")


def dropped(store: HwmStore, batch_id: int, checkpoint: str | None, sinks: int,
            refusal: StaleBatchError) -> StaleBatchError:
    """``refusal``, once the stages this run's Redis states (at most ``sinks``) made for the
    batch are deleted (or saying that they could not be, and expire in a day)."""
    try:
        store.drop_stages(batch_id, checkpoint, sinks)
    except redis.RedisError as exc:
        return StaleBatchError(f"{refusal}; the rows it staged in the HWM store could not "
                               f"be deleted ({store.describe_error(exc)}) and expire in a day")
    return refusal
