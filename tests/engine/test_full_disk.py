"""A checkpoint whose filesystem is full: each file SQE cannot write is one sentence naming it
(no traceback), and a running query's lock heartbeat waits for room instead of dying (a real
tmpfs, filled; mounting one needs root, and the tests say so where it is refused)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqe.engine.run.failure import describe_failure
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.errors import RunError
from sqe.observe.batch_report import BatchReport
from sqe.observe.progress import PROGRESS_FILE, ProgressLog, read_progress
from tests.support import ROOT


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A 1 MB tmpfs with a checkpoint directory on it, and the file that fills it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a filesystem to fill needs a tmpfs mount: {mounted.stderr.strip()}")
    try:
        (disk / "ck").mkdir()
        yield disk / "ck", disk / "filler"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(filler: Path) -> None:
    with open(filler, "wb", buffering=0) as out:
        for size in (65536, 4096, 1):
            with pytest.raises(OSError, match="No space"):
                while True:
                    out.write(b"\0" * size)


def test_a_file_the_full_checkpoint_cannot_take_is_one_sentence_and_leaves_nothing(full_disk):
    ck, filler = full_disk
    files = CheckpointFiles(None, str(ck))
    files.write("sqe-base", "0\n")
    _fill(filler)
    with pytest.raises(RunError, match=rf"^checkpoint {ck}: cannot write sqe-base: No space "
                       "left on device; make room on its filesystem$"):
        files.write("sqe-base", "1\n" * 10_000)
    with pytest.raises(RunError, match="cannot write sqe-run.lock: No space left on device"):
        files.create("sqe-run.lock", "x" * 100_000)
    assert sorted(p.name for p in ck.iterdir()) == ["sqe-base"]  # no half-written file
    assert files.read("sqe-base") == "0\n"


def test_a_lock_heartbeat_on_a_full_disk_waits_for_room_and_goes_on(full_disk, monkeypatch,
                                                                     caplog):
    import sqe.engine.run.lock as lock_module

    ck, filler = full_disk
    monkeypatch.setattr(lock_module, "HEARTBEAT_SECONDS", 0.1)
    lock = CheckpointLock(CheckpointFiles(None, str(ck)))
    lock.acquire()
    try:
        with caplog.at_level(logging.WARNING, logger="sqe"):
            _fill(filler)
            deadline = lock_module.time.monotonic() + 10
            while "heartbeat is tried again" not in caplog.text:
                assert lock_module.time.monotonic() < deadline
                lock_module.time.sleep(0.05)
            filler.unlink()
            while "heartbeat is written again" not in caplog.text:
                assert lock_module.time.monotonic() < deadline
                lock_module.time.sleep(0.05)
        assert lock._beat is not None and lock._beat.is_alive()
        assert caplog.text.count("cannot write sqe-run.lock") == 1  # said once
    finally:
        lock.release()


@pytest.mark.spark
def test_a_run_on_a_full_disk_stops_in_one_sentence(full_disk):
    ck, filler = full_disk
    _fill(filler)
    done = subprocess.run([sys.executable, "-m", "sqe.cli.main", "run",
                           str(ROOT / "topologies/hello.yaml"), "--once", "--checkpoint",
                           str(ck / "hello")], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert (f"hello.yaml: checkpoint {ck / 'hello'}: cannot write sqe-run.lock: No space left "
            "on device; make room on its filesystem") in done.stderr


def test_the_progress_file_on_a_full_disk_skips_batches_and_is_written_again(full_disk, caplog):
    ck, filler = full_disk
    progress = ProgressLog(ck / PROGRESS_FILE, "t")
    progress.append(BatchReport("In", 0))
    _fill(filler)
    batch = 0
    with caplog.at_level(logging.WARNING, logger="sqe"):
        while "cannot write the progress file" not in caplog.text:  # the page's room gone
            batch += 1
            assert batch < 100
            progress.append(BatchReport("In", batch))
        progress.append(BatchReport("In", batch + 1))
        filler.unlink()
        progress.append(BatchReport("In", batch + 2))
    assert caplog.text.count("cannot write the progress file") == 1
    assert f"is written again, from batch {batch + 2} of In" in caplog.text
    assert [e.report.batch_id for e in read_progress(ck / PROGRESS_FILE).entries] == [
        *range(batch), batch + 2]  # whole lines only: what the failed write left was cut


def test_a_query_that_failed_on_a_full_disk_is_said_so():
    failed = RuntimeError("[STREAM_FAILED] Query [id = 1] terminated with exception: "
                          "No space left on device\n\tat java.io.FileOutputStream.writeBytes")
    assert describe_failure(failed, []).startswith(
        "a disk the streaming query writes to is full (No space left on device): its "
        "checkpoint's filesystem, or Spark's local directories (spark.local.dir)")
