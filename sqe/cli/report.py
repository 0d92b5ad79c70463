"""``sqe report``: what a topology's runs did, from the progress file of its checkpoint.

:func:`summarize` folds the entries of one or more progress files
(:mod:`sqe.run.progress`) into one :class:`StreamSummary` per stream (per
``<topology>.<stream>`` consumer): batches, records in, replays dropped, rows
written per state, Bloom chunks read and skipped, bytes decoded, total and median
batch duration and records per second.  :func:`summary_table` prints them as a
table (a column per stream), :func:`summary_json` as JSON, and :func:`plot`
draws per-batch records in, replays dropped, Bloom chunks skipped and batch
duration as four panels sharing the batch axis, one line per stream, with
matplotlib's Agg backend (the optional ``plot`` extra).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqe.errors import PrerequisiteError, SqeError
from sqe.run.progress import PROGRESS_FILE, BatchEntry, Progress, read_progress

__all__ = ["NO_MATPLOTLIB", "ReportError", "StreamSummary", "load", "plot", "progress_file_of",
           "summarize", "summary_json", "summary_table", "write_json"]

#: What ``--plot`` says when matplotlib is not installed.
NO_MATPLOTLIB = ("sqe report --plot needs matplotlib, which is not installed; install it with "
                 "pip install 'sqe-spark[plot]'")


class ReportError(SqeError, ValueError):
    """A report that cannot be written where it was asked to go."""


def progress_file_of(path: str | os.PathLike[str]) -> Path:
    """The progress file of a checkpoint directory, or ``path`` itself when it is a file."""
    p = Path(path)
    return p if p.is_file() else p / PROGRESS_FILE


def load(paths: Sequence[str | os.PathLike[str]]) -> list[Progress]:
    """Read the progress files of checkpoint directories (or the files themselves)."""
    return [read_progress(progress_file_of(p)) for p in paths]


@dataclass
class StreamSummary:
    """The totals of one stream (one ``<topology>.<stream>`` consumer) over its batches."""

    topology: str
    stream: str
    runs: int = 0
    batches: int = 0  # batches that ran
    skipped_batches: int = 0  # re-runs of batches committed already (nothing done)
    records_read: int = 0
    replays_dropped: int = 0
    unparseable_keys: int = 0
    unparseable_values: int = 0
    written: dict[str, int] = field(default_factory=dict)
    chunks_read: int = 0
    chunks_skipped_bloom: int = 0
    chunks_skipped_hwm: int = 0
    chunks_false_positive: int = 0
    bytes_decoded: int = 0
    bytes_not_decoded: int = 0
    dead_letters: int = 0
    duration_s: float = 0.0  # the batches' durations added up
    median_batch_s: float = 0.0
    records_per_s: float | None = None  # records_read / duration_s
    first_started: str = ""  # ISO 8601, UTC
    last_finished: str = ""

    @property
    def consumer(self) -> str:
        """``<topology>.<stream>``, the name in the HWM store."""
        return f"{self.topology}.{self.stream}"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def summarize(progress: Sequence[Progress]) -> list[StreamSummary]:
    """One summary per stream, in the order the streams first appear."""
    groups: dict[tuple[str, str], list[BatchEntry]] = {}
    for p in progress:
        for e in p.entries:
            groups.setdefault((e.topology, e.stream), []).append(e)
    out = []
    for (topology, stream), entries in groups.items():
        s = StreamSummary(topology, stream, runs=len({e.run for e in entries}))
        ran = [e for e in entries if not e.skipped]
        s.batches, s.skipped_batches = len(ran), len(entries) - len(ran)
        for e in entries:
            s.records_read += e.records_read
            s.replays_dropped += e.replays_dropped
            s.unparseable_keys += e.unparseable_keys
            s.unparseable_values += e.unparseable_values
            for state, rows in e.written.items():
                s.written[state] = s.written.get(state, 0) + rows
            for name in ("chunks_read", "chunks_skipped_bloom", "chunks_skipped_hwm",
                         "chunks_false_positive", "bytes_decoded", "bytes_not_decoded",
                         "dead_letters"):
                setattr(s, name, getattr(s, name) + e.source.get(name, 0))
            s.duration_s += e.duration_s
        if ran:
            s.median_batch_s = statistics.median(e.duration_s for e in ran)
        if s.duration_s > 0:
            s.records_per_s = s.records_read / s.duration_s
        s.first_started = _iso(min(e.started for e in entries))
        s.last_finished = _iso(max(e.started + e.duration_s for e in entries))
        out.append(s)
    return out


def _short(iso: str) -> str:
    return iso.replace("T", " ").removesuffix("+00:00")


def _rate(per_s: float) -> str:
    return f"{per_s:,.{0 if per_s >= 10 else 1}f}"


def _count(n: int) -> str:
    return f"{n:,}"


def summary_table(progress: Sequence[Progress]) -> str:
    """The summary as printed by ``sqe report``: a row per measure, a column per stream."""
    summaries = summarize(progress)
    states = sorted({state for s in summaries for state in s.written})
    rows: list[tuple[str, list[str]]] = [
        ("runs", [_count(s.runs) for s in summaries]),
        ("batches", [_count(s.batches) + (f" (+{s.skipped_batches} skipped)"
                                          if s.skipped_batches else "") for s in summaries]),
        ("records in", [_count(s.records_read) for s in summaries]),
        ("replays dropped", [_count(s.replays_dropped) for s in summaries]),
        *[(f"rows written to {state}",
           [_count(s.written[state]) if state in s.written else "-" for s in summaries])
          for state in states],
        ("chunks read", [_count(s.chunks_read) for s in summaries]),
        ("chunks skipped (Bloom)", [_count(s.chunks_skipped_bloom) for s in summaries]),
        ("bytes decoded", [_count(s.bytes_decoded) for s in summaries]),
        ("total batch time (s)", [f"{s.duration_s:.2f}" for s in summaries]),
        ("median batch time (s)", [f"{s.median_batch_s:.2f}" for s in summaries]),
        ("records/s", ["-" if s.records_per_s is None else _rate(s.records_per_s)
                       for s in summaries]),
        ("first batch started (UTC)", [_short(s.first_started) for s in summaries]),
        ("last batch finished (UTC)", [_short(s.last_finished) for s in summaries]),
    ]
    header = ["", *[s.consumer for s in summaries]]
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(header[i + 1]), *(len(vals[i]) for _, vals in rows))
              for i in range(len(summaries))]
    lines = []
    for p in progress:
        lines.append(f"{p.path}: {len(p.entries)} batch entr{'y' if len(p.entries) == 1 else 'ies'}"
                     + (" (an unfinished last line, from a crash, ignored)" if p.truncated
                        else ""))
    lines.append("")
    for label, vals in [(header[0], header[1:]), *rows]:
        cells = (f"{v:>{w}}" for v, w in zip(vals, widths, strict=True))
        lines.append(f"{label:<{label_width}}  " + "  ".join(cells))
    return "\n".join(lines)


def summary_json(progress: Sequence[Progress]) -> dict[str, Any]:
    """The summary as ``sqe report --json`` prints it."""
    return {
        "files": [{"path": str(p.path), "entries": len(p.entries), "truncated": p.truncated}
                  for p in progress],
        "streams": [{"consumer": s.consumer, **asdict(s)} for s in summarize(progress)],
    }


def _series(progress: Sequence[Progress]) -> dict[str, list[BatchEntry]]:
    """The batches that ran, per ``<topology>.<stream>``, by batch id then start."""
    out: dict[str, list[BatchEntry]] = {}
    for p in progress:
        for e in p.entries:
            if not e.skipped:
                out.setdefault(f"{e.topology}.{e.stream}", []).append(e)
    return {k: sorted(v, key=lambda e: (e.batch_id, e.started)) for k, v in out.items()}


def plot(progress: Sequence[Progress], out: str | os.PathLike[str]) -> Path:
    """Draw the per-batch panels into the PNG ``out``; raises :class:`PrerequisiteError` with
    :data:`NO_MATPLOTLIB` when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise PrerequisiteError(NO_MATPLOTLIB) from None
    panels = [  # title, y label, value of a batch, whether the value is a count
        ("Records in", "records", lambda e: e.records_read, True),
        ("Replays dropped", "records", lambda e: e.replays_dropped, True),
        ("Bloom chunks skipped", "chunks", lambda e: e.source.get("chunks_skipped_bloom", 0),
         True),
        ("Batch duration", "seconds", lambda e: e.duration_s, False),
    ]
    series = _series(progress)
    fig = Figure(figsize=(8, 9), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True)
    for ax, (title, unit, value, count) in zip(axes, panels, strict=True):
        top = 0.0
        for name, entries in series.items():
            values = [value(e) for e in entries]
            top = max(top, *values)
            ax.plot([e.batch_id for e in entries], values, marker="o", markersize=4,
                    linewidth=1.2, label=name)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        if count:
            ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, min_n_ticks=1))
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        ax.grid(True, alpha=0.3)
    ids = [e.batch_id for entries in series.values() for e in entries]
    if ids:
        ax = axes[-1]
        ax.set_xlim(min(ids) - 0.5, max(ids) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axes[-1].set_xlabel("batch id")
    if series:
        axes[0].legend(fontsize=8, loc="best")
    fig.suptitle("sqe report: " + ", ".join(str(p.path.parent.name or p.path) for p in progress))
    path = Path(out)
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise ReportError(f"cannot write the plot to {path}: {exc.strerror or exc}") from None
    return path


def write_json(progress: Sequence[Progress]) -> str:
    """:func:`summary_json` as indented text."""
    return json.dumps(summary_json(progress), indent=2)
