"""A run stalled past its checkpoint lock's takeover finds the taker at its next heartbeat:
it does not write the lock back, and it says who took the checkpoint over; clocks that
disagree (a holder's stepped back, a rival's ahead, for real: support/clock.py) take no
live run's lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqe.engine.run import lock as lock_module
from sqe.engine.run.lock import LOCK_FILE, STALE_SECONDS, CheckpointLock
from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.errors import RunError
from support.clock import SteppedClock

#: A process holding (or taking) the lock of checkpoint argv[1] as host argv[2].
_LOCKER = """
import sys, threading
from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.engine.run.lock import CheckpointLock
from sqe.errors import RunError
from support.clock import SteppedClock
lock = CheckpointLock(CheckpointFiles(None, sys.argv[1]))
lock.host = sys.argv[2]
try:
    lock.acquire()
except RunError as exc:
    print(f"error: {exc}", flush=True)
    sys.exit(1)
print("held", flush=True)
threading.Event().wait(float(sys.argv[3]))
"""


def _locker(tmp_path: Path, seconds: float, *args: str) -> subprocess.Popen[str]:
    """The locker with its clock ``seconds`` from the real one (:class:`SteppedClock`)."""
    clock = SteppedClock(tmp_path / "clock")
    clock.step(seconds)
    return subprocess.Popen([sys.executable, "-c", _LOCKER, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **clock.env()})


def _stale(path, lock: CheckpointLock) -> None:
    """The lock file as ``lock``'s host would have left it after a long pause."""
    content = json.loads((path / LOCK_FILE).read_text())
    content["heartbeat"] = time.time() - STALE_SECONDS - 5
    (path / LOCK_FILE).write_text(json.dumps(content))


def test_a_stalled_run_whose_lock_was_taken_over_stops_renewing_it(tmp_path, monkeypatch
                                                                    ) -> None:
    monkeypatch.setattr(lock_module, "WATCH_SECONDS", 2.0)  # how long host-b watches it
    first = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
    first.host = "host-a"
    first.acquire()
    try:
        assert first.renew() and first.taken_over is None
        first._stop.set()  # host-a paused: its heartbeat stops ...
        assert first._beat is not None
        first._beat.join()
        first._stop.clear()
        _stale(tmp_path, first)  # ... long ago; host-b's scheduler starts another run
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


def test_a_holder_whose_clock_stepped_back_still_beats_and_keeps_its_lock(tmp_path) -> None:
    (tmp_path / "ck").mkdir()
    holder = _locker(tmp_path, -300, str(tmp_path / "ck"), "host-a", "60")
    tmp_path = tmp_path / "ck"
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rival = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
        rival.host = "host-b"
        with pytest.raises(RunError) as refused:  # its heartbeat reads 5 minutes old
            rival.acquire()
        said = str(refused.value)
        assert f"checkpoint {tmp_path} is in use by the run of PID " in said and " on host-a" in said
        assert "s behind this host's clock, but it beats, so the two hosts' clocks differ" in said
        assert json.loads((tmp_path / LOCK_FILE).read_text())["host"] == "host-a"
    finally:
        holder.kill()
        holder.wait()


def test_a_rival_whose_clock_is_ahead_takes_no_live_runs_lock(tmp_path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    holder = CheckpointLock(CheckpointFiles(None, str(ck)))
    holder.host = "host-a"
    holder.acquire()
    try:
        rival = _locker(tmp_path, 300, str(ck), "host-b", "0")
        said, _ = rival.communicate(timeout=120)
        assert rival.returncode == 1, said
        assert "but it beats, so the two hosts' clocks differ" in said
        assert holder.renew() and holder.taken_over is None
    finally:
        holder.release()
