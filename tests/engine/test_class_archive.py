"""The driver JVM's class archive, with real JVMs: written by the first local session, mapped by
the next, never mapped once damaged, and off on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqe.engine.spark.class_archive import ARCHIVE_ENV

ROOT = Path(__file__).resolve().parents[2]

_SESSION = """
import json
from sqe.engine.spark.session import build_session
spark = build_session("archive-test", {"spark.sql.shuffle.partitions": "2"})
total = spark.range(1000).selectExpr("sum(id)").first()[0]
args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
            .getRuntimeMXBean().getInputArguments())
print(json.dumps({"total": total, "share": [a for a in args if "Archive" in a]}))
if STOP:
    spark.stop()  # a program that stops its session before it exits
"""


def _session(tmp: Path, stop: bool = False, **env: str) -> dict:
    """One local session in its own process, with ``tmp`` as its temporary directory (``stop``:
    the program stops its session before it exits)."""
    environ = {k: v for k, v in os.environ.items() if k != ARCHIVE_ENV}
    environ.update({"TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), **env})
    done = subprocess.run([sys.executable, "-c", f"STOP = {stop}\n" + _SESSION], env=environ,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cds" not in done.stdout.lower() and "shared archive" not in done.stderr.lower()
    assert "directory in paths" not in done.stdout + done.stderr, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _other_archive(tmp: Path, name: str, home: Path) -> list[Path]:
    """The files of another installation's archive, sealed with its Spark home."""
    files = [tmp / f"sqe-spark-classes-{name}{suffix}" for suffix in (".jsa", ".lock", ".sealed")]
    files[0].write_bytes(b"x" * 10)
    files[1].write_text("")
    files[2].write_text(f"10 {files[0].stat().st_mtime_ns} {home}\n")
    return files


@pytest.mark.slow
def test_the_first_session_writes_the_archive_and_the_next_maps_it(tmp_path):
    removed = _other_archive(tmp_path, "000000000001", tmp_path / "a-removed-virtualenv")
    kept = _other_archive(tmp_path, "000000000002", tmp_path)
    first = _session(tmp_path, stop=True)
    # the writer deleted the archive of an installation that is gone, and only that one
    assert not any(p.exists() for p in removed) and all(p.exists() for p in kept)
    for path in kept:
        path.unlink()
    assert first["total"] == 499500
    assert [a.split("=")[0] for a in first["share"]] == ["-XX:ArchiveClassesAtExit"]
    archives = list(tmp_path.glob("sqe-spark-classes-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 10_000_000
    assert not list(tmp_path.glob("*.partial"))  # moved to its name once tried

    second = _session(tmp_path)
    assert second == {"total": 499500, "share": [f"-XX:SharedArchiveFile={archives[0]}"]}

    # A damaged archive (truncated: it would crash a JVM that maps it) is not mapped but
    # written again.
    archives[0].chmod(0o644)
    with open(archives[0], "r+b") as f:
        f.truncate(5_000_000)
    third = _session(tmp_path)
    assert third["total"] == 499500
    assert [a.split("=")[0] for a in third["share"]] == ["-XX:ArchiveClassesAtExit"]
    fourth = _session(tmp_path)
    assert fourth["share"] == [f"-XX:SharedArchiveFile={archives[0]}"]


def test_the_archive_can_be_turned_off(tmp_path):
    got = _session(tmp_path, **{ARCHIVE_ENV: "off"})
    assert got == {"total": 499500, "share": []}
    assert not list(tmp_path.glob("sqe-spark-classes-*"))


def test_no_archive_is_tried_with_a_spark_conf_directory_on_the_class_path(tmp_path):
    # Spark's launcher puts its conf directory on the driver's class path, and class-data
    # sharing refuses a directory with files in it there: the JVM wrote no archive and said
    # "Cannot have non-empty directory in paths" on the run's output as it exited, every run
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 2\n")
    for _ in range(2):
        got = _session(tmp_path, stop=True, SPARK_CONF_DIR=str(conf))
        assert got == {"total": 499500, "share": []}
    assert not list(tmp_path.glob("sqe-spark-classes-*"))
