"""A run stalled past its checkpoint lock's takeover finds the taker at its next heartbeat:
it does not write the lock back, and it says who took the checkpoint over; clocks that
disagree (a holder's stepped back, a rival's ahead, by libfaketime) take no live run's lock."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from sqe.engine import lock as lock_module
from sqe.engine.checkpoint import CheckpointFiles
from sqe.engine.lock import LOCK_FILE, STALE_SECONDS, CheckpointLock
from sqe.errors import RunError

#: A process holding (or taking) the lock of checkpoint argv[1] as host argv[2].
_LOCKER = """
import sys, threading
from sqe.engine.checkpoint import CheckpointFiles
from sqe.engine.lock import CheckpointLock
from sqe.errors import RunError
lock = CheckpointLock(CheckpointFiles(None, sys.argv[1]))
lock.host = sys.argv[2]
try:
    lock.acquire()
except RunError as exc:
    print(f"error: {exc}", flush=True)
    sys.exit(1)
print("held", flush=True)
threading.Event().wait(float(sys.argv[3]))  # libfaketime fails time.sleep (EINVAL)
"""


def _with_clock(offset: str, *args: str) -> list[str]:
    """The locker run with its clock ``offset`` from the real one (libfaketime; the monotonic
    clock left alone, as a step of the wall clock leaves it)."""
    return ["env", "DONT_FAKE_MONOTONIC=1", "faketime", "-f", offset, sys.executable, "-c",
            _LOCKER, *args]


needs_faketime = pytest.mark.skipif(shutil.which("faketime") is None,
                                    reason="libfaketime's faketime is not installed")


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


@needs_faketime
def test_a_holder_whose_clock_stepped_back_still_beats_and_keeps_its_lock(tmp_path) -> None:
    holder = subprocess.Popen(_with_clock("-5m", str(tmp_path), "host-a", "60"),
                              stdout=subprocess.PIPE, text=True)
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


@needs_faketime
def test_a_rival_whose_clock_is_ahead_takes_no_live_runs_lock(tmp_path) -> None:
    holder = CheckpointLock(CheckpointFiles(None, str(tmp_path)))
    holder.host = "host-a"
    holder.acquire()
    try:
        done = subprocess.run(_with_clock("+5m", str(tmp_path), "host-b", "0"),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "but it beats, so the two hosts' clocks differ" in done.stdout
        assert holder.renew() and holder.taken_over is None
    finally:
        holder.release()
