"""The last step of a batch: its new high-water marks, its id and its staged rows committed to
the consumer's HWM store in one atomic step (:meth:`sqe.ledger.hwm.HwmStore.commit`), for both
ways a batch is written (:mod:`sqe.engine.batch.per_batch`, :mod:`sqe.engine.batch.one_pass_batch`).

Once committed, the staged rows still have to reach the states' keys
(:meth:`~sqe.ledger.hwm.HwmStore.finish_applying`, some 10 ms of the server's time per 1,000
rows).  Given an :class:`Applier`, the commit leaves that to a thread of its own, so the
batch ends and Spark goes on with the next trigger (its offsets, its logs, its planning) while
the rows are applied; the next batch waits for them before its admission.  A reader of a state
sees the rows when they are applied, as before; nothing is committed later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

import redis

from sqe.errors import StaleBatchError, StateError
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import Failed, asked, times_tried
from state.sink import Batch

__all__ = ["Applier", "commit_hwm", "dropped"]

log = logging.getLogger("sqe")


class Applier:
    """Applies a committed batch's staged rows in a thread of its own (:meth:`start`), one
    batch at a time; :meth:`wait` returns once they are applied."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, store: HwmStore, stages: Sequence[str], batch: Batch) -> None:
        """Apply the rows of ``stages`` that ``batch``'s commit left to ``store``."""
        self.wait()

        def run() -> None:
            try:
                _apply(store, batch, stages)
            except BaseException as exc:  # raised to the stream by wait()
                self._error = exc

        self._thread = threading.Thread(target=run, name="sqe-apply", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Return once the rows being applied are (raise what failed other than Redis)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error


def commit_hwm(batch: Batch, updates: Mapping[tuple[int, int], int],
               applier: Applier | None = None) -> None:
    """Commit ``batch`` (its marks ``updates``, its stages, offsets and checkpoint) to its HWM
    store; nothing without one.  A Redis error is a :class:`StateError`: the batch is re-run
    and its output filtered as replays.

    A connection that drops or times out (a reset, a reply lost after the script ran, a
    failover) is not the end of the run: the commit is sent again on a new connection for up
    to the store's ``commit_retry_s`` seconds, with a warning.  It is idempotent by batch id:
    a commit that did run the first time answers "already committed" the second, and the rows
    it recorded to apply are applied then.  Staged rows are on the store's replicas before the
    commit (each staging task waits for them), so a commit sent again to a promoted replica
    finds them.  With ``applier``, the committed rows are applied by it, in the background.
    """
    store = batch.store
    if store is None:
        return
    later = applier is not None and bool(batch.stages)
    committed: list[bool] = []

    def commit() -> None:
        committed.append(store.commit(batch.batch_id, updates, batch.stages, batch.offsets,
                                      batch.checkpoint, apply=not later, seen=batch.seen))

    try:
        _, tries = asked(store, commit, f"batch {batch.batch_id} of {batch.consumer}",
                         "the commit")
    except Failed as failed:
        raise _not_committed(batch, failed) from None
    if tries:
        _apply(store, batch)  # what a commit that ran before its reply was lost recorded
        log.warning("batch %d of %s: committed after %d failed attempt(s)", batch.batch_id,
                    batch.consumer, tries)
    elif later and committed[-1]:
        assert applier is not None
        applier.start(store, [stage.key for stage in batch.stages], batch)


def _apply(store: HwmStore, batch: Batch, stages: Sequence[str] | None = None) -> None:
    """Apply the rows ``batch``'s commit left to apply (``stages``: its stage keys; None: every
    stage left); a Redis error is a warning, since they are committed and the next batch's
    admission, or the next run's start, applies them first."""
    try:
        store.finish_applying(stages)
    except redis.RedisError as exc:
        log.warning("batch %d of %s is committed; applying its staged rows failed (%s), and "
                    "the next batch or run applies them first", batch.batch_id,
                    batch.consumer, store.describe_error(exc))


def _not_committed(batch: Batch, failed: Failed) -> StateError:
    """The sentence of a commit that failed."""
    return StateError(f"cannot commit the HWMs of {batch.consumer}: {failed}"
                      f"{times_tried(failed.tries)}; the batch "
                      "is re-run and its output filtered as replays")


def dropped(store: HwmStore, batch_id: int, writer: str | None, sinks: int,
            refusal: StaleBatchError) -> StaleBatchError:
    """``refusal``, once the stages this run's Redis states (``writer``'s, at most ``sinks``)
    made for the batch are deleted (or saying that they could not be, and expire in a day)."""
    try:
        store.drop_stages(batch_id, writer, sinks)
    except redis.RedisError as exc:
        return StaleBatchError(f"{refusal}; the rows it staged in the HWM store could not "
                               f"be deleted ({store.describe_error(exc)}) and expire in a day")
    return refusal
