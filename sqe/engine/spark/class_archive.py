"""The driver JVM's class-data archive for local runs: Spark's classes mapped from one file
instead of read, parsed and verified from its jars at every start.

A local ``sqe run`` starts a JVM that loads some ten thousand classes before its first batch.
With a dynamic class-data-sharing archive (AppCDS, Java 13 and later) the same session and
first job take 3.1 s instead of 5.2 s on the project's 2-core machine
(``bench/results/throughput.md``).

:func:`archive_options` gives the JVM options of one local session:

* when the archive exists, ``-XX:SharedArchiveFile=<archive>``: the JVM maps it;
* otherwise, and when no other process is writing it, ``-XX:ArchiveClassesAtExit=<temporary
  file>``: this JVM records the classes it loaded and writes them when it exits (some 150 MB;
  the run that writes it starts about 3 s slower and takes a few seconds to exit).
  :func:`note_jvm` notes its class path once the session runs; :func:`finish_archive`, called
  at interpreter exit, closes the JVM, waits for it, and moves
  the written file to the archive's name, so a JVM never maps a file still being written.

The archive belongs to one ``java`` and one Spark installation: its name carries a hash of
both, in the temporary directory, beside the worker launcher of
:mod:`sqe.engine.spark.worker_python`.  A written archive is kept only once a JVM has mapped it with
sharing required (``-Xshare:on``), and its size and time are sealed: a file that no longer
matches (truncated, replaced) is never mapped, since a damaged archive can crash the JVM, and
is written again.  A JVM that cannot use it (another build of the JDK, another class path)
runs without it: sharing stays ``auto``, and the JVM's CDS log lines are off, so nothing is
printed.  Nor is one used when a directory with files in it is on the driver's class path
(a Spark conf directory holding ``spark-defaults.conf``, Hadoop's or YARN's conf directory):
the JVM refuses to write or map an archive then.  A run that writes an archive deletes those
of Spark installations that no longer exist (a removed virtualenv's).
``SQE_CLASS_ARCHIVE=off`` never uses or writes one.  It is never used on a cluster, or under
``spark-submit``, where SQE does not start the JVM.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqe.engine.spark.launcher import spark_conf_dir, spark_home

__all__ = ["ARCHIVE_ENV", "archive_options", "archive_path", "finish_archive", "note_jvm"]

log = logging.getLogger("sqe")

#: Set to ``off`` to start the JVM without an archive and never write one.
ARCHIVE_ENV = "SQE_CLASS_ARCHIVE"

#: JVM options that keep its class-data-sharing messages (an archive it cannot use) off the
#: run's output.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: How long :func:`finish_archive` waits for the JVM to write the archive and exit.
_WRITE_TIMEOUT = 120.0


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str((Path(home) / "bin" / "java").resolve())
    found = shutil.which("java")
    return str(Path(found).resolve()) if found else "java"


def _full_directory(env: Mapping[str, str]) -> Path | None:
    """A directory with files in it that Spark's launcher puts on the driver's class path (its
    conf directory, Hadoop's and YARN's), or None.  Class-data sharing refuses such a class
    path: the JVM writes no archive (it says so on its standard output as it exits) and maps
    none."""
    for name in (str(spark_conf_dir(env)), env.get("HADOOP_CONF_DIR"), env.get("YARN_CONF_DIR")):
        if not name:
            continue
        try:
            with os.scandir(name) as entries:
                if any(True for _ in entries):
                    return Path(name)
        except OSError:  # not a directory, or not there: nothing on the path
            continue
    return None


def archive_path(class_path: str = "") -> Path:
    """Where the archive of this ``java``, this pyspark installation and the driver's extra
    ``class_path`` is (whether or not it exists)."""
    import pyspark

    home = spark_home()
    java = _java()
    try:
        stamp = str(os.stat(java).st_mtime_ns)
    except OSError:
        stamp = ""
    ident = "\0".join([java, stamp, str(home), pyspark.__version__, *_stamped(class_path)])
    digest = hashlib.blake2b(ident.encode(), digest_size=6).hexdigest()
    return Path(tempfile.gettempdir()) / f"sqe-spark-classes-{digest}.jsa"


@dataclass
class _Writing:
    """This process's JVM is writing the archive to ``partial``; ``lock`` keeps others off."""

    archive: Path
    partial: Path
    lock: Any
    class_path: str | None = None  # the JVM's, noted once it runs (see :func:`note_jvm`)


_writing: _Writing | None = None


def _stamped(class_path: str) -> list[str]:
    """Each entry of ``class_path`` with its size and time: a jar replaced is another path."""
    out = []
    for entry in filter(None, class_path.split(os.pathsep)):
        try:
            stat = os.stat(entry)
            out.append(f"{entry} {stat.st_size} {stat.st_mtime_ns}")
        except OSError:
            out.append(entry)
    return out


def archive_options(environ: dict[str, str] | os._Environ[str] | None = None,
                    class_path: str = "") -> str:
    """The JVM options for the driver of a local session whose extra class path is
    ``class_path``: map the archive, or write it at exit (see the module docstring); empty
    when ``SQE_CLASS_ARCHIVE=off``."""
    global _writing
    env = os.environ if environ is None else environ
    if env.get(ARCHIVE_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return ""
    full = _full_directory(env)
    if full is not None:  # the JVM can neither write nor map an archive with it on its path
        log.debug("no class archive: %s, on the driver's class path, is a directory with "
                  "files in it", full)
        return _QUIET
    archive = archive_path(class_path)
    if _intact(archive):
        return f"-XX:SharedArchiveFile={archive} {_QUIET}"
    if _writing is not None:  # this process writes it with an earlier session's JVM
        return _QUIET
    try:
        lock = open(archive.with_suffix(".lock"), "a+")  # held until the JVM exits
    except OSError as exc:  # another user's, or a read-only directory
        log.debug("no class archive written: %s", exc)
        return _QUIET
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _intact(archive):  # written meanwhile
            lock.close()
            return f"-XX:SharedArchiveFile={archive} {_QUIET}"
        for stale in archive.parent.glob(f"{archive.stem}.*.partial"):  # of writers that died
            stale.unlink(missing_ok=True)
        _forget_removed(archive.parent)
        archive.unlink(missing_ok=True)  # damaged or replaced since it was kept
    except OSError as exc:  # another run is writing it, or files this user cannot remove
        log.debug("no class archive written: %s", exc)
        lock.close()
        return _QUIET
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    _writing = _Writing(archive, partial, lock)
    atexit.register(finish_archive)
    return f"-XX:ArchiveClassesAtExit={partial} {_QUIET}"


def note_jvm(session: Any) -> None:
    """Note the class path of the JVM that writes the archive, while it runs (the session may
    be stopped before the interpreter exits, and the archive is tried with this class path)."""
    if _writing is None or _writing.class_path is not None:
        return
    jvm = getattr(getattr(session, "_sc", None), "_jvm", None)  # a classic session's
    if jvm is not None:
        _writing.class_path = str(jvm.java.lang.System.getProperty("java.class.path"))


def finish_archive() -> None:
    """If this process's JVM is writing the archive: end the JVM (it writes the file as it
    exits), wait for it, and give the file the archive's name.  Run at interpreter exit."""
    global _writing
    writing, _writing = _writing, None
    if writing is None:
        return
    try:
        exited = _end_jvm()
        class_path = writing.class_path
        if exited == 0 and class_path is not None and _usable(writing.partial, class_path):
            stat = writing.partial.stat()
            _seal(writing.archive).write_text(
                f"{stat.st_size} {stat.st_mtime_ns} {spark_home()}\n")
            writing.partial.replace(writing.archive)
    finally:
        writing.partial.unlink(missing_ok=True)
        writing.lock.close()


def _seal(archive: Path) -> Path:
    """The file that records the archive's size and time as it was tried and kept."""
    return archive.with_suffix(".sealed")


def _intact(archive: Path) -> bool:
    """The archive exists as it was kept (a truncated or replaced file would crash the JVM
    that maps it: it is not used, and is written again)."""
    try:
        stat = archive.stat()
        size, mtime = _seal(archive).read_text().split(" ", 2)[:2]
        return stat.st_size == int(size) and stat.st_mtime_ns == int(mtime)
    except (OSError, ValueError):
        return False


def _forget_removed(directory: Path) -> None:
    """Delete the archives of Spark installations that no longer exist (a removed virtualenv
    leaves its archive, some 150 MB, behind); run by a writer, under its lock."""
    for seal in directory.glob("sqe-spark-classes-*.sealed"):
        try:
            home = seal.read_text().split(" ", 2)[2].strip()
        except (OSError, IndexError):
            continue
        if home and not Path(home).exists():
            for path in (seal.with_suffix(".jsa"), seal.with_suffix(".lock"), seal):
                path.unlink(missing_ok=True)


def _usable(archive: Path, class_path: str) -> bool:
    """Whether a JVM with ``class_path`` maps ``archive`` (``-Xshare:on`` makes one it cannot
    map an error; a damaged archive can crash the JVM that maps it, so none is kept untried)."""
    if not archive.exists() or archive.stat().st_size == 0:
        return False
    try:
        done = subprocess.run([_java(), "-cp", class_path, f"-XX:SharedArchiveFile={archive}",
                               "-Xshare:on", *_QUIET.split(), "-version"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _end_jvm() -> int | None:
    """Stop the session's JVM the way PySpark's gateway ends it (its standard input closed),
    wait until it has exited; its exit code (``None``: unknown, or killed)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    if proc is None:
        return None
    context = SparkContext._active_spark_context
    if context is not None:
        context.stop()
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        return proc.wait(_WRITE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
