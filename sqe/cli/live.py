"""``sqe run``'s live progress: per stream, records done of the backlog, rate, replays, ETA.

On a terminal, :class:`LiveProgress` keeps one updating line per stream (rich's
progress display), and the batch lines of the log print above them; elsewhere
(a pipe, a file, a scheduler's log) it logs one plain line per batch::

    sqe: Events: 30,000 records in 3 batches, 41,250 records/s, 12 dropped as replays;
    70,000 behind, about 2 s to go

(one line, folded here)

The backlog is what the run's :class:`~sqe.observe.watch.BacklogPoller` last
asked the brokers (a stream that is not read with the ``sqe-kafka`` source
has none); the rate is the records read since the stream's first batch of this
run started; the time to go is the backlog at that rate.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from sqe.observe.batch_report import BatchReport
from sqe.observe.watch import RunWatcher, StreamView
from sqe.source.kafka.lag import PartitionLag, total_backlog

__all__ = ["LiveProgress", "StreamProgress", "duration_text"]

log = logging.getLogger("sqe")


def duration_text(seconds: float) -> str:
    """``seconds`` as a person says it: ``2 s``, ``3 min 05 s``, ``1 h 02 min``.

        >>> duration_text(1.6), duration_text(185), duration_text(3720)
        ('2 s', '3 min 05 s', '1 h 02 min')
    """
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class StreamProgress:
    """What one stream did in this run, and what it has left."""

    stream: str
    records: int = 0
    batches: int = 0
    replays: int = 0
    first_start: float | None = None  # when its first batch of this run started (epoch s)
    last_end: float | None = None
    behind: int | None = None  # the backlog last asked; None: not known

    def add(self, report: BatchReport) -> None:
        """Count a finished batch in."""
        if report.skipped:
            return
        self.records += report.records_read
        self.batches += 1
        self.replays += report.replays_dropped
        if self.first_start is None:
            self.first_start = report.started
        self.last_end = report.started + report.duration_s

    def rate(self) -> float | None:
        """Records per second since the first batch started (None before one ended)."""
        if self.first_start is None or self.last_end is None:
            return None
        elapsed = self.last_end - self.first_start
        return self.records / elapsed if elapsed > 0 else None

    def eta(self) -> float | None:
        """Seconds until the backlog is read at this rate (None: unknown)."""
        rate = self.rate()
        if self.behind is None or not rate:
            return None
        return self.behind / rate

    def text(self) -> str:
        """The stream's progress as a sentence."""
        rate = self.rate()
        parts = [f"{self.records:,} records in {self.batches} batch"
                 f"{'' if self.batches == 1 else 'es'}"]
        if rate is not None:
            parts.append(f"{rate:,.0f} records/s")
        parts.append(f"{self.replays:,} dropped as replays")
        text = ", ".join(parts)
        if self.behind is not None:
            eta = self.eta()
            text += f"; {self.behind:,} behind" + (
                "" if self.behind == 0 else f", about {duration_text(eta)} to go"
                if eta is not None else "")
        return f"{self.stream}: {text}"


class LiveProgress(RunWatcher):
    """The run's progress, as updating lines on a terminal or a plain line per batch."""

    def __init__(self, out: IO[str] | None = None, terminal: bool | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.terminal = self.out.isatty() if terminal is None else terminal
        self.streams: dict[str, StreamProgress] = {}
        self._display: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._handlers: list[tuple[logging.StreamHandler[Any], IO[str]]] = []

    def started(self, streams: Sequence[StreamView]) -> None:
        self.streams = {v.stream: StreamProgress(v.stream) for v in streams}
        if not self.terminal:
            return
        console = Console(file=self.out, force_terminal=True)
        self._display = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[line]}"), console=console, transient=False,
            redirect_stdout=False, redirect_stderr=False)
        for name in self.streams:
            self._tasks[name] = self._display.add_task(name, total=None, line="waiting for "
                                                       "its first batch")
        self._display.start()
        self._route_logs(console)

    def _route_logs(self, console: Console) -> None:
        """Log lines to the terminal print above the progress lines, not through them."""
        proxy = _ConsoleStream(console)
        for handler in logging.getLogger().handlers + log.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.out:
                self._handlers.append((handler, handler.stream))
                handler.setStream(proxy)

    def batch_done(self, report: BatchReport) -> None:
        progress = self.streams.setdefault(report.stream, StreamProgress(report.stream))
        progress.add(report)
        if progress.behind is not None and report.offsets:
            progress.behind = max(0, progress.behind - report.records_read)
        if self._display is None:
            if not report.skipped:
                log.info(progress.text())
            return
        self._show(progress)

    def backlog(self, stream: str, lags: Sequence[PartitionLag]) -> None:
        progress = self.streams.setdefault(stream, StreamProgress(stream))
        progress.behind = total_backlog(list(lags))
        if self._display is not None:
            self._show(progress)

    def _show(self, progress: StreamProgress) -> None:
        assert self._display is not None
        task = self._tasks.get(progress.stream)
        if task is None:
            return
        total = progress.records + progress.behind if progress.behind is not None else None
        line = progress.text().split(": ", 1)[1]
        self._display.update(task, completed=progress.records, total=total, line=line)

    def ended(self) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None
        for handler, stream in self._handlers:
            handler.setStream(stream)
        self._handlers.clear()


class _ConsoleStream:
    """A text stream whose lines the console prints above its live display."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.console.print(self._pending, markup=False, highlight=False, soft_wrap=True)
            self._pending = ""

    def isatty(self) -> bool:
        return True
