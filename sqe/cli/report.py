"""``sqe report``: what a topology's runs did, from the progress file of its checkpoint.

:func:`summarize` folds the entries of one or more progress files
(:mod:`sqe.observe.progress`) into one :class:`StreamSummary` per stream (per
``<topology>.<stream>`` consumer): batches, records in, replays dropped, rows
written per state, Bloom chunks read and skipped, bytes decoded, total and median
batch duration and records per second.  :func:`summary_table` prints them as a
table (a column per stream), :func:`summary_json` as JSON, and :func:`plot`
draws per-batch records in, replays dropped, Bloom chunks skipped and batch
duration as four panels sharing the batch axis (the :func:`figure`), one line per
stream, or labelled bars for a stream of fewer than :data:`FEW_BATCHES` batches,
with matplotlib's Agg backend (the optional ``plot`` extra).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqe.config.extras import install_hint
from sqe.errors import PrerequisiteError, ReportError
from sqe.observe.batch_report import BatchReport
from sqe.observe.progress import PROGRESS_FILE, Progress, ProgressEntry, read_progress

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FEW_BATCHES", "NO_MATPLOTLIB", "ReportError", "StreamSummary", "figure", "load", "plot",
           "progress_file_of", "summarize", "summary_json", "summary_table", "write_json"]

#: What ``--plot`` says when matplotlib is not installed.
NO_MATPLOTLIB = f"sqe report --plot needs matplotlib, which is not installed: {install_hint('matplotlib')}"



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
    totals: BatchReport  # every counter summed over the batches
    runs: int = 0
    batches: int = 0  # batches that ran
    skipped_batches: int = 0  # re-runs of batches committed already (nothing done)
    median_batch_s: float = 0.0
    records_per_s: float | None = None  # records read / the batches' durations added up
    first_started: str = ""  # ISO 8601, UTC
    last_finished: str = ""

    @property
    def consumer(self) -> str:
        """``<topology>.<stream>``, the name in the HWM store."""
        return f"{self.topology}.{self.stream}"

    def to_json(self) -> dict[str, Any]:
        """A flat map: the summary's own fields, then the totals, the source's counters inline."""
        totals = self.totals.to_json()
        source = totals.pop("source")
        source.pop("replays_dropped")  # the batch's own counter says it
        for key in ("stream", "batch_id", "skipped", "filtering", "already_written", "started"):
            totals.pop(key)
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "totals"}
        return {"consumer": self.consumer, **own, **totals, **source}


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def summarize(progress: Sequence[Progress]) -> list[StreamSummary]:
    """One summary per stream, in the order the streams first appear."""
    groups: dict[tuple[str, str], list[ProgressEntry]] = {}
    for p in progress:
        for e in p.entries:
            groups.setdefault((e.topology, e.report.stream), []).append(e)
    out = []
    for (topology, stream), entries in groups.items():
        reports = [e.report for e in entries]
        s = StreamSummary(topology, stream, BatchReport(stream, -1),
                          runs=len({e.run for e in entries}))
        ran = [r for r in reports if not r.skipped]
        s.batches, s.skipped_batches = len(ran), len(reports) - len(ran)
        for r in reports:
            s.totals.add(r)
        if ran:
            s.median_batch_s = statistics.median(r.duration_s for r in ran)
        s.records_per_s = s.totals.rate()
        s.first_started = _iso(min(r.started for r in reports))
        s.last_finished = _iso(max(r.started + r.duration_s for r in reports))
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
    totals = [s.totals for s in summaries]
    states = sorted({state for t in totals for state in t.written})
    merged = {state for t in totals for state in t.merged}  # aggregate entries, not rows
    rows: list[tuple[str, list[str]]] = [
        ("runs", [_count(s.runs) for s in summaries]),
        ("batches", [_count(s.batches) + (f" (+{s.skipped_batches} skipped)"
                                          if s.skipped_batches else "") for s in summaries]),
        ("records in", [_count(t.records_read) for t in totals]),
        ("replays dropped", [_count(t.replays_dropped) for t in totals]),
        *[(f"{'entries merged into' if state in merged else 'rows written to'} {state}",
           [_count(t.written[state]) if state in t.written else "-" for t in totals])
          for state in states],
        ("chunks read", [_count(t.source.chunks_read) for t in totals]),
        ("chunks skipped (Bloom)", [_count(t.source.chunks_skipped_bloom) for t in totals]),
        ("bytes decoded", [_count(t.source.bytes_decoded) for t in totals]),
        ("total batch time (s)", [f"{t.duration_s:.2f}" for t in totals]),
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
        "streams": [s.to_json() for s in summarize(progress)],
    }


def _series(progress: Sequence[Progress]) -> dict[str, list[BatchReport]]:
    """The batches that ran, per ``<topology>.<stream>``, by batch id then start."""
    out: dict[str, list[BatchReport]] = {}
    for p in progress:
        for e in p.entries:
            if not e.report.skipped:
                out.setdefault(f"{e.topology}.{e.report.stream}", []).append(e.report)
    return {k: sorted(v, key=lambda r: (r.batch_id, r.started)) for k, v in out.items()}


#: A stream with fewer batches than this is drawn as bars labelled with their values, not as a
#: line: one or two points of a line read as nothing.
FEW_BATCHES = 3


def _label(value: float, count: bool) -> str:
    return _count(int(value)) if count else f"{value:.2f}"


def figure(progress: Sequence[Progress]) -> Figure:
    """The per-batch panels as a matplotlib figure (Agg canvas), as :func:`plot` saves it.

    A stream with at least :data:`FEW_BATCHES` batches is a line with a dot per batch; one with
    fewer is a bar per batch, beside the bars of the other such streams, with its value written
    above it.  The batch axis has integer ticks only."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FixedLocator, MaxNLocator
    except ImportError:
        raise PrerequisiteError(NO_MATPLOTLIB) from None
    panels = [  # title, y label, value of a batch, whether the value is a count
        ("Records in", "records", lambda e: e.records_read, True),
        ("Replays dropped", "records", lambda e: e.replays_dropped, True),
        ("Bloom chunks skipped", "chunks", lambda e: e.source.chunks_skipped_bloom, True),
        ("Batch duration", "seconds", lambda e: e.duration_s, False),
    ]
    series = _series(progress)
    few = [name for name, entries in series.items() if len(entries) < FEW_BATCHES]
    width = min(0.8 / len(few), 0.35) if few else 0.0  # of a bar; a group of bars is <= 0.8
    fig = Figure(figsize=(8, 9), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True)
    for ax, (title, unit, value, count) in zip(axes, panels, strict=True):
        top = 0.0
        for i, (name, entries) in enumerate(series.items()):
            color = f"C{i % 10}"
            ids = [e.batch_id for e in entries]
            values = [value(e) for e in entries]
            top = max(top, *values)
            if name in few:
                shift = (few.index(name) - (len(few) - 1) / 2) * width
                bars = ax.bar([b + shift for b in ids], values, width=width, color=color,
                              alpha=0.85, label=name, zorder=2)
                ax.bar_label(bars, labels=[_label(v, count) for v in values], padding=2,
                             fontsize=8)
            else:
                ax.plot(ids, values, marker="o", markersize=4, linewidth=1.2, color=color,
                        label=name, zorder=3)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        if count:
            ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, min_n_ticks=1))
        ax.set_ylim(0, top * (1.18 if few else 1.08) if top > 0 else 1)  # room for the labels
        ax.grid(True, alpha=0.3, zorder=0)
    ids = sorted({e.batch_id for entries in series.values() for e in entries})
    if ids:
        ax = axes[-1]
        ax.set_xlim(ids[0] - 0.5, ids[-1] + 0.5)
        ax.xaxis.set_major_locator(FixedLocator(ids) if len(ids) <= 12
                                   else MaxNLocator(integer=True, min_n_ticks=1))
    axes[-1].set_xlabel("batch id")
    if series:
        axes[0].legend(fontsize=8, loc="best")
    fig.suptitle("sqe report: " + ", ".join(str(p.path.parent.name or p.path) for p in progress))
    return fig


def plot(progress: Sequence[Progress], out: str | os.PathLike[str]) -> Path:
    """Draw :func:`figure` into the PNG ``out``; raises :class:`PrerequisiteError` with
    :data:`NO_MATPLOTLIB` when matplotlib is not installed."""
    fig = figure(progress)
    path = Path(out)
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise ReportError(f"cannot write the plot to {path}: {exc.strerror or exc}") from None
    return path


def write_json(progress: Sequence[Progress]) -> str:
    """:func:`summary_json` as indented text."""
    return json.dumps(summary_json(progress), indent=2)
