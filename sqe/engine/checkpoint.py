"""A run's checkpoint directory: what Spark keeps there, and what SQE adds to it.

Spark keeps, per stream (``<checkpoint>/<streamName>``), ``offsets/<batch>``:
the source offsets each batch ends at, written before the batch runs, and
``commits/<batch>``, written once it is done.  SQE reads them, and writes its
own files, through the session's Hadoop FileSystem, so a checkpoint on a local
disk, HDFS or S3 is read the same way:

* ``<streamName>/sqe-batch-base``: the id the stores count this checkpoint's
  batch 0 as (absent: 0).  A checkpoint that resumed from the stores' commits, or
  that started after ``sqe reset``, continues their numbering, so no batch id a
  state has seen comes again (:mod:`state.commits`).
* ``sqe-run.lock`` at the root: which process runs on it (:mod:`sqe.engine.lock`).
"""

from __future__ import annotations

import os
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

__all__ = ["CheckpointFiles", "StreamCheckpoint", "local_checkpoint"]

_BASE = "sqe-batch-base"


def local_checkpoint(spark: SparkSession, location: str) -> str:
    """``location`` as Spark should get it: a relative path on a local default file system
    made absolute here, since Spark's JVM may have another working directory than Python."""
    if "://" in location or os.path.isabs(location):
        return location.rstrip("/") or "/"
    default = spark._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///"
    return os.path.abspath(location) if default.startswith("file:") else location


class CheckpointFiles:
    """Files under one directory, through the session's Hadoop FileSystem."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self.location = location.rstrip("/")
        self._jvm: Any = spark._jvm
        self._fs = self._path("").getFileSystem(spark._jsc.hadoopConfiguration())

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(f"{self.location}/{name}" if name
                                                   else self.location)

    def local(self, name: str) -> str | None:
        """The path of ``name`` on this machine's disk, or None on a remote file system."""
        if self._fs.getUri().getScheme() != "file":
            return None
        return str(self._fs.makeQualified(self._path(name)).toUri().getPath())

    def read(self, name: str) -> str | None:
        """The text of file ``name``, or None when there is none."""
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
        path = self._path(folder)
        if not self._fs.exists(path):
            return []
        return [str(status.getPath().getName()) for status in self._fs.listStatus(path)]

    def write(self, name: str, text: str) -> None:
        """Write ``text`` as file ``name``, replacing it."""
        out = self._fs.create(self._path(name), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def create(self, name: str, text: str) -> bool:
        """Write ``text`` as file ``name`` unless it exists; False when it existed (atomic on a
        local disk and on HDFS)."""
        local = self.local(name)
        if local is not None:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            try:
                fd = os.open(local, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
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

    def delete(self, name: str) -> None:
        """Delete file ``name`` if it is there."""
        self._fs.delete(self._path(name), False)


class StreamCheckpoint:
    """One stream's checkpoint directory (``<checkpoint>/<streamName>``)."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self.files = CheckpointFiles(spark, location)

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

    def end_offsets(self, batch_id: int) -> str | None:
        """The source offsets batch ``batch_id`` ends at (Spark's JSON), or None."""
        text = self.files.read(f"offsets/{batch_id}")
        if text is None:
            return None
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1] if len(lines) >= 3 else None

    def base(self) -> int:
        """The id the stores count this checkpoint's batch 0 as."""
        text = self.files.read(_BASE)
        return int(text.strip()) if text and text.strip() else 0

    def set_base(self, base: int) -> None:
        """Record ``base`` (for a checkpoint that has no batch yet)."""
        self.files.write(_BASE, f"{int(base)}\n")
