"""The progress file of a topology run: one JSON line per micro-batch, under the checkpoint.

``sqe run`` appends every batch's report to ``<checkpoint>/sqe-progress.jsonl``
(:data:`PROGRESS_FILE`), the checkpoint directory that holds one sub-directory per
stream, so a restarted run over the same checkpoint continues the same file.  A
line holds every field of the batch's :class:`~sqe.observe.batch_report.BatchReport`
(records read, replays dropped, rows written per state, the source's Bloom and
chunk counters, warnings, when the batch started and how long it took) plus the
run (a random id per ``run_topology`` call) and the topology name.

This module owns that format: :class:`ProgressLog` appends a line (one
``write`` per line, and before the first line of a run it cuts off the
unfinished last line a crash may have left), :func:`read_progress` reads the
lines back: an unfinished last line is ignored and said so
(:attr:`Progress.truncated`); any other bad line is a :class:`ProgressError`
naming the file and line.  ``sqe report`` (:mod:`sqe.cli.report`) reads it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqe.errors import ProgressError
from sqe.observe.batch_report import BatchReport

log = logging.getLogger("sqe")

__all__ = ["FORMAT", "PROGRESS_FILE", "Progress", "ProgressEntry", "ProgressError",
           "ProgressLog", "last_report", "parse_entry", "progress_path", "read_progress"]

#: The file's name inside the checkpoint directory.
PROGRESS_FILE = "sqe-progress.jsonl"

#: The format version written in each line (``"format": 1``).
FORMAT = 1



def progress_path(checkpoint: str | os.PathLike[str]) -> Path | None:
    """The progress file of a checkpoint directory; None when the checkpoint is not on the
    local file system (e.g. ``hdfs://...`` under spark-submit): no progress file then."""
    text = os.fspath(checkpoint)
    if "://" in text:
        if not text.startswith("file://"):
            return None
        text = text[len("file://"):]
    return Path(text) / PROGRESS_FILE


def _entry(report: BatchReport, run: str, topology: str) -> dict[str, Any]:
    return {"format": FORMAT, "run": run, "topology": topology, **report.to_json()}


class ProgressLog:
    """Appends the batch entries of one run to a progress file (thread-safe: each stream's
    ``foreachBatch`` runs in a thread of its own)."""

    def __init__(self, path: str | os.PathLike[str], topology: str) -> None:
        self.path = Path(path)
        self.topology = topology
        self.run = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._repaired = False
        self._failed = False

    def __getstate__(self) -> dict[str, Any]:
        # a Spark Connect server runs foreachBatch, and so this log, in a process of its own
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _cut_unfinished_line(self) -> None:
        """Drop what a crash left after the last newline, so the next line starts a line."""
        try:
            with self.path.open("rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return
                end = size
                while end > 0:  # back to just after the last newline (or the file's start)
                    start = max(0, end - 65536)
                    f.seek(start)
                    cut = f.read(end - start).rfind(b"\n")
                    if cut >= 0:
                        end = start + cut + 1
                        break
                    end = start
                f.truncate(end)
        except FileNotFoundError:
            return

    def append(self, report: BatchReport) -> None:
        """Append one batch's entry as a line.

        The batch is committed when this runs, so a file that cannot be written (a full
        disk) is a warning, once until it can be again, never a failed batch; the next batch
        tries again, after cutting what the failed write left of its line.
        """
        text = json.dumps(_entry(report, self.run, self.topology), separators=(",", ":"),
                          sort_keys=True) + "\n"
        with self._lock:
            try:
                if not self._repaired:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._cut_unfinished_line()
                    self._repaired = True
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(text)
            except OSError as exc:
                self._repaired = False
                if not self._failed:
                    log.warning(f"cannot write the progress file {self.path}: "
                                f"{exc.strerror or exc}; batches are left out of it until it "
                                "can be written again")
                self._failed = True
                return
            if self._failed:
                log.warning(f"the progress file {self.path} is written again, from batch "
                            f"{report.batch_id} of {report.stream}")
            self._failed = False


@dataclass(frozen=True)
class ProgressEntry:
    """One line of a progress file: one micro-batch of one stream, and the run it was in."""

    run: str
    topology: str
    report: BatchReport


def parse_entry(text: str) -> ProgressEntry:
    """A line as an entry; raises ValueError saying what is wrong with it."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ProgressError("expected a JSON object")
    if data.get("format") != FORMAT:
        raise ProgressError(f"format {data.get('format')!r} is not {FORMAT}, the format this "
                         "version of sqe reads")
    missing = [k for k in ("run", "topology") if k not in data] + BatchReport.missing(data)
    if missing:
        raise ProgressError(f"missing {', '.join(missing)}")
    for k in ("run", "topology"):
        if not isinstance(data[k], str):
            raise ProgressError(f"{k} is not a string")
    return ProgressEntry(data["run"], data["topology"], BatchReport.from_json(
        {k: v for k, v in data.items() if k not in ("format", "run", "topology")}))


@dataclass(frozen=True)
class Progress:
    """The entries of a progress file, in file order."""

    path: Path
    entries: list[ProgressEntry]
    truncated: bool = False  # the last line was unfinished (a crash while writing) and ignored


def read_progress(path: str | os.PathLike[str]) -> Progress:
    """Read a progress file back.

    An unfinished last line (no newline, not a whole entry: a crash while writing it)
    is ignored and said so in :attr:`Progress.truncated`; any other line that is not
    an entry raises :class:`ProgressError` naming the file and line.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ProgressError(f"{p}: no progress file; it is written by sqe run (and sqe demo) "
                            "into the checkpoint directory") from None
    except OSError as exc:
        raise ProgressError(f"{p}: cannot read the progress file: {exc.strerror}") from None
    lines = raw.split(b"\n")
    last_unfinished = not raw.endswith(b"\n")  # split leaves "" after a final newline
    entries: list[ProgressEntry] = []
    truncated = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entries.append(parse_entry(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as exc:
            if last_unfinished and number == len(lines):
                truncated = True
                continue
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ProgressError(f"{p}, line {number}: not a batch entry of sqe run: "
                                f"{reason}") from None
    if not entries:
        raise ProgressError(f"{p}: the progress file holds no batch yet")
    return Progress(p, entries, truncated)


def _lines_backwards(path: Path, block: int = 65536) -> Iterator[bytes]:
    """The file's lines, last first (the piece after the last newline first of all: empty
    when the file ends with one), reading ``block`` bytes at a time from the end."""
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        rest = b""
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            lines = (f.read(end - start) + rest).split(b"\n")
            rest = lines[0]  # may start before this block: joined with the next one read
            yield from reversed(lines[1:])
            end = start
        yield rest


def last_report(path: Path, wanted: Callable[[BatchReport], bool]) -> BatchReport | None:
    """The last batch report of the progress file at ``path`` that is ``wanted``, read from
    the end (a file of days of batches is not read whole); None when there is none or no
    file.  A line that is not an entry raises :class:`ProgressError`; an unfinished last line
    (a crash while writing it) is passed over."""
    try:
        for number, line in enumerate(_lines_backwards(path)):
            if number == 0 or not line.strip():
                continue  # the unfinished piece after the last newline, if any
            try:
                report = parse_entry(line.decode("utf-8")).report
            except (ValueError, UnicodeDecodeError) as exc:
                raise ProgressError(f"{path}: a line near its end is not a batch entry of sqe "
                                    f"run: {exc}") from None
            if wanted(report):
                return report
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProgressError(f"{path}: cannot read the progress file: {exc.strerror}") from None
    return None
