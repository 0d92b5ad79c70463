"""A run's checkpoint directory: what Spark keeps there, and what SQE adds to it.

Spark keeps, per stream (``<checkpoint>/<streamName>``), ``offsets/<batch>``:
the source offsets each batch ends at, written before the batch runs, and
``commits/<batch>``, written once it is done.  SQE reads them, and writes its
own files, on a local disk directly and elsewhere (HDFS, S3) through the session's
Hadoop FileSystem:

* ``<streamName>/sqe-start-offsets``: the source offsets batch 0 starts at, fixed when the
  checkpoint was new (a source's ``startingOffsets`` of ``latest`` or ``earliest`` would say
  otherwise later), so batch 0 run again reads what it read, and any batch can be read again
  (:meth:`StreamCheckpoint.batch_range`); a hop's, ``sqe-start-offsets.<topic>``: a query
  may read two hops (a stream-stream join), whose offsets Spark keeps a line each of, under
  their topics (the ``sqe-kafka`` option ``reportRead``);
* ``<streamName>/sqe-batch-base``: the id the stores count this checkpoint's
  batch 0 as (absent: 0).  A checkpoint that resumed from the stores' commits, or
  that started after ``sqe reset``, continues their numbering, so no batch id a
  state has seen comes again (:mod:`sqe.ledger.commits`).
* ``sqe-run.lock`` at the root: which process runs on it (:mod:`sqe.engine.run.lock`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from sqe.engine.spark.failed_writes import clear_failed_writes
from sqe.engine.spark.spark_api import default_file_system, is_connect
from sqe.errors import ArgumentError, RunError

__all__ = ["FILE_MANAGER_SETTING", "CheckpointFiles", "StreamCheckpoint", "local_checkpoint",
           "not_a_directory", "use_file_system_manager"]

_BASE = "sqe-batch-base"
_START = "sqe-start-offsets"


def local_checkpoint(spark: SparkSession, location: str) -> str:
    """``location`` as Spark should get it: a relative path on a local default file system
    made absolute here, since Spark's JVM may have another working directory than Python."""
    if "://" in location or os.path.isabs(location):
        return location.rstrip("/") or "/"
    default = default_file_system(spark)
    return os.path.abspath(location) if default.startswith("file:") else location


#: The Spark setting that names the class writing a streaming query's offsets and commits.
FILE_MANAGER_SETTING = "spark.sql.streaming.checkpointFileManagerClass"
#: SQE's JVM classes (sources and build: ``sqe/engine/spark/java``, ``tools/build_jar.py``), on the
#: class path of a local run's driver (:func:`sqe.engine.spark.session.build_session`).
SQE_JAR = Path(__file__).resolve().with_name("java") / "sqe-spark.jar"
_FILE_SYSTEM_MANAGERS = (
    "sqe.spark.LocalCheckpointFileManager",  # in SQE_JAR: the temporary files without chmod
    # Spark's own: 4.1 and later, 4.0
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager")


def use_file_system_manager(spark: SparkSession, location: str) -> str | None:
    """For a checkpoint on this machine's disk, have Spark write its offsets and commits
    through Hadoop's FileSystem instead of its default FileContext, unless the session names
    a manager already; returns the class set (None: nothing set).

    Without Hadoop's native library, a FileContext rename asks each file's link status by
    running a program in a child process; the FileSystem's is a plain rename, as atomic on a
    local disk.  Measured on 2 cores: a micro-batch's cycle 0.29 s instead of 0.37 s
    (``bench/batch_cost.py``).  The FileSystem's new file still runs ``chmod`` in a child
    process, twice a micro-batch: a local run's driver has :data:`SQE_JAR` on its class path,
    whose manager creates it without (``LocalCheckpointFileManager.java``); elsewhere Spark's
    FileSystem manager does.  Classic sessions only: over Spark Connect the server decides.
    """
    if is_connect(spark) or _local_path(spark, location) is None \
            or spark.conf.get(FILE_MANAGER_SETTING, None):
        return None
    for name in _FILE_SYSTEM_MANAGERS:
        try:
            spark._jvm.java.lang.Class.forName(name)  # type: ignore[union-attr]
        except Py4JJavaError:
            continue
        spark.conf.set(FILE_MANAGER_SETTING, name)
        return name
    return None


def _local_path(spark: SparkSession | None, location: str) -> Path | None:
    """``location`` on this machine's disk, or None when it is on a remote file system."""
    if location.startswith("file:"):
        return Path(urlsplit(location).path)
    if "://" in location:
        return None
    if spark is not None:
        default = default_file_system(spark)
        if not default.startswith("file:"):
            return None
    return Path(location).absolute()


def default_checkpoint(topology: str) -> str:
    """Where a run of ``topology`` (its name) keeps its checkpoint when none is given:
    ``checkpoints/<name>`` under the working directory."""
    return str(Path("checkpoints") / topology)


def not_a_directory(location: str) -> str | None:
    """Why ``location`` cannot be a checkpoint on this machine's disk (a file where it or a
    directory above it would be), or ``None`` when it can be (or it is on a remote one)."""
    local = _local_path(None, location)
    for path in (local, *local.parents) if local is not None else ():
        if path.exists():
            return None if path.is_dir() else (f"checkpoint {location} cannot be a directory: "
                                               f"{path} is a file")
    return None


class CheckpointFiles:
    """Files under one directory: on a local disk through Python, elsewhere (HDFS, S3)
    through the session's Hadoop FileSystem."""

    def __init__(self, spark: SparkSession | None, location: str) -> None:
        self.location = location.rstrip("/")
        self._local = _local_path(spark, self.location)
        if self._local is None:
            if spark is None:
                raise ArgumentError(f"checkpoint {location} is not on this machine: reading it "
                                 "needs the Spark session")
            self._jvm: Any = spark._jvm
            self._fs = self._path("").getFileSystem(spark._jsc.hadoopConfiguration())

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(f"{self.location}/{name}" if name
                                                   else self.location)

    def read(self, name: str) -> str | None:
        """The text of file ``name``, or None when there is none."""
        if self._local is not None:
            try:
                return (self._local / name).read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                return None
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def names(self, folder: str) -> list[str]:
        """The names in ``folder`` (none when it is missing)."""
        if self._local is not None:
            where = self._local / folder
            return [p.name for p in where.iterdir()] if where.is_dir() else []
        path = self._path(folder)
        if not self._fs.exists(path):
            return []
        return [str(status.getPath().getName()) for status in self._fs.listStatus(path)]

    def write(self, name: str, text: str) -> None:
        """Write ``text`` as file ``name``, replacing it."""
        if self._local is not None:
            target = self._local / name
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(target)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise self._unwritten(name, exc) from None
            return
        out = self._fs.create(self._path(name), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def create(self, name: str, text: str) -> bool:
        """Write ``text`` as file ``name`` unless it exists; False when it existed (atomic on a
        local disk and on HDFS)."""
        if self._local is not None:
            target = self._local / name
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a full disk, or a file where the folder goes
                raise self._unwritten(name, exc) from None
            try:
                fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            except OSError as exc:
                raise self._unwritten(name, exc) from None
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(text)
            except OSError as exc:  # a file half written is no file
                target.unlink(missing_ok=True)
                raise self._unwritten(name, exc) from None
            return True
        if self._fs.exists(self._path(name)):
            return False
        try:
            out = self._fs.create(self._path(name), False)
        except Py4JJavaError as exc:  # another writer was first
            if "FileAlreadyExists" in str(exc):
                return False
            raise
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        return True

    def _unwritten(self, name: str, exc: OSError) -> RunError:
        """The one sentence for a file of the checkpoint that could not be written (a full
        disk, a read-only filesystem)."""
        return RunError(f"checkpoint {self.location}: cannot write {name}: "
                        f"{exc.strerror or exc}; make room on its filesystem")

    def delete(self, name: str) -> None:
        """Delete file ``name`` if it is there."""
        if self._local is not None:
            (self._local / name).unlink(missing_ok=True)
            return
        self._fs.delete(self._path(name), False)

    def clear_failed_writes(self) -> list[Path]:
        """Remove what Spark's writes that failed left under the directory, on a local disk
        (:func:`~sqe.engine.spark.failed_writes.clear_failed_writes`)."""
        return clear_failed_writes(self._local) if self._local is not None else []


class StreamCheckpoint:
    """One stream's checkpoint directory (``<checkpoint>/<streamName>``); ``topic``: the
    topic of a hop's source, whose offsets are its line of the offsets log."""

    def __init__(self, spark: SparkSession | None, location: str,
                 topic: str | None = None) -> None:
        self.files = CheckpointFiles(spark, location)
        self.topic = topic

    @property
    def location(self) -> str:
        """Where it is."""
        return self.files.location

    def _ids(self, folder: str) -> list[int]:
        return sorted(int(n) for n in self.files.names(folder) if n.isdigit())

    def last_committed(self) -> int | None:
        """The last batch Spark finished on this checkpoint, or None."""
        ids = self._ids("commits")
        return ids[-1] if ids else None

    def is_empty(self) -> bool:
        """Whether Spark planned no batch here yet."""
        return not self._ids("offsets")

    def query_id(self) -> str | None:
        """The streaming query's id, as Spark's ``metadata`` file keeps it (None before the
        query first started)."""
        text = self.files.read("metadata")
        query = json.loads(text).get("id") if text else None
        return str(query) if query else None

    def last_batch(self) -> tuple[int, str | None] | None:
        """The last batch Spark finished here, as the stores count it, and the source offsets
        it ended at (Spark's JSON; None: not known); None when it finished none."""
        done = self.last_committed()
        return None if done is None else (self.base() + done, self.end_offsets(done))

    def end_offsets(self, batch_id: int) -> str | None:
        """The source offsets batch ``batch_id`` ends at (Spark's JSON), or None."""
        text = self.files.read(f"offsets/{batch_id}")
        if text is None:
            return None
        sources = [line for line in text.splitlines() if line.strip()][2:]
        if self.topic is None or len(sources) <= 1:
            return sources[-1] if sources else None
        for line in sources:
            if line.startswith("{") and list(json.loads(line)) == [self.topic]:
                return line
        raise RunError(f"checkpoint {self.location}: batch {batch_id}'s offsets "
                       f"(offsets/{batch_id}) have no line of topic {self.topic} among its "
                       f"{len(sources)} sources' (a query that reads hops reads each under "
                       "its topic: start it on a new checkpoint)")

    def base(self) -> int:
        """The id the stores count this checkpoint's batch 0 as."""
        text = self.files.read(_BASE)
        return int(text.strip()) if text and text.strip() else 0

    def set_base(self, base: int) -> None:
        """Record ``base`` (for a checkpoint that has no batch yet)."""
        self.files.write(_BASE, f"{int(base)}\n")

    def start_offsets(self) -> str | None:
        """The source offsets this checkpoint's batch 0 starts at (Spark's JSON), as the run
        that began it recorded them; None: not recorded (a FIXED stream, or an older SQE)."""
        text = self.files.read(self._start_file)
        if self.topic is not None and not (text and text.strip()):
            text = self.files.read(_START)  # a hop's, written by an earlier SQE
        return text.strip() if text and text.strip() else None

    def set_start_offsets(self, offsets: str) -> None:
        """Record where batch 0 starts (for a checkpoint that has no batch yet)."""
        self.files.write(self._start_file, offsets + "\n")

    @property
    def start_file(self) -> str:
        """Where :meth:`start_offsets` are kept (the file's location)."""
        return f"{self.location}/{self._start_file}"

    @property
    def _start_file(self) -> str:
        return _START if self.topic is None else f"{_START}.{self.topic}"

    def batch_range(self, batch_id: int) -> tuple[str, str] | None:
        """The source offsets Spark's batch ``batch_id`` starts and ends at, or None when one
        of them is not known."""
        start = self.start_offsets() if batch_id == 0 else self.end_offsets(batch_id - 1)
        end = self.end_offsets(batch_id)
        return (start, end) if start is not None and end is not None else None
