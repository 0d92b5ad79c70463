"""The last step of a batch: its new high-water marks, its id and its staged rows committed to
the consumer's HWM store in one atomic step (:meth:`sqe.ledger.hwm.HwmStore.commit`), for both
ways a batch is written (:mod:`sqe.engine.per_batch`, :mod:`sqe.engine.one_pass_batch`)."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from sqe.errors import StaleBatchError, StateError
from sqe.ledger.hwm import HwmStore
from sqe.state.sink import Batch

__all__ = ["commit_hwm", "dropped"]


def commit_hwm(batch: Batch, updates: Mapping[tuple[int, int], int]) -> None:
    """Commit ``batch`` (its marks ``updates``, its stages, offsets and checkpoint) to its HWM
    store; nothing without one.  A Redis error is a :class:`StateError`: the batch is re-run
    and its output filtered as replays."""
    if batch.store is None:
        return
    try:
        batch.store.commit(batch.batch_id, updates, batch.stages, batch.offsets,
                           batch.checkpoint)
    except redis.RedisError as exc:
        raise StateError(f"cannot commit the HWMs of {batch.consumer}: "
                         f"{batch.store.describe_error(exc)}; the batch is re-run and its output "
                         "filtered as replays") from None


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
