"""A run stalled past its checkpoint lock's takeover finds the taker at its next heartbeat:
it does not write the lock back, and it says who took the checkpoint over."""

from __future__ import annotations

import json
import time

from sqe.engine.checkpoint import CheckpointFiles
from sqe.engine.lock import LOCK_FILE, STALE_SECONDS, CheckpointLock


def _stale(path, lock: CheckpointLock) -> None:
    """The lock file as ``lock``'s host would have left it after a long pause."""
    content = json.loads((path / LOCK_FILE).read_text())
    content["heartbeat"] = time.time() - STALE_SECONDS - 5
    (path / LOCK_FILE).write_text(json.dumps(content))


def test_a_stalled_run_whose_lock_was_taken_over_stops_renewing_it(tmp_path) -> None:
    first = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
    first.host = "host-a"
    first.acquire()
    try:
        assert first.renew() and first.taken_over is None
        _stale(tmp_path, first)  # host-a paused; host-b's scheduler starts another run
        second = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
        second.host = "host-b"
        second.acquire()
        taken = (tmp_path / LOCK_FILE).read_text()
        assert not first.renew()  # host-a wakes up
        assert (tmp_path / LOCK_FILE).read_text() == taken  # the taker's lock stays
        assert first.taken_over is not None
        assert f"the run of PID {second.pid} on host-b took it over" in first.taken_over
        assert "this run stops" in first.taken_over
        first.release()
        assert (tmp_path / LOCK_FILE).read_text() == taken  # not the stalled run's to delete
        assert second.renew()
        second.release()
        assert not (tmp_path / LOCK_FILE).exists()
    finally:
        first._stop.set()


def test_a_lock_file_deleted_by_hand_is_held_again_at_the_next_heartbeat(tmp_path) -> None:
    lock = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
    lock.acquire()
    (tmp_path / LOCK_FILE).unlink()
    assert lock.renew()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == lock.pid
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
