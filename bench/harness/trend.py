"""Whether a long run's memory is flat: the RSS samples of a run that may have been started
again several times, and the slope of each kind of process's RSS over the second half, fitted
within each start (a restart's drop is not a trend).  ``bench/soak.py`` and
``bench/nemesis.py`` report it; :class:`MemoryLog` samples the nemesis's runs and keeps the
samples in a file as they are taken."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: A start's first minute (its JVM starting, its first batches) is left out of the slopes.
WARMUP_S = 60.0
KINDS = ("tree", "pss", "driver", "jvm", "workers")


def slope(points: list[tuple[Any, float, float]]) -> float | None:
    """The slope of y over x fitted within each group (one intercept per group)."""
    groups = defaultdict[Any, list[tuple[float, float]]](list)
    for g, x, y in points:
        groups[g].append((x, y))
    means = {g: [statistics.fmean(v) for v in zip(*pts, strict=True)] for g, pts in groups.items()}
    terms = [((x - means[g][0]) * (y - means[g][1]), (x - means[g][0]) ** 2) for g, x, y in points]
    den = sum(d for _, d in terms)
    return sum(n for n, _ in terms) / den if den else None


def memory_trend(rows: list[dict[str, Any]], span_s: float) -> dict[str, Any]:
    """One run's samples (``t``: seconds into the span, ``start``: which start of the run,
    ``since``: when that start began, ``rss_mb``: peaks by kind since the last sample) over
    ``span_s`` seconds: its RSS once warm, at the end and at its peak (MB), and the slope of
    each kind (MB/min) over the span's second half; the tree's PSS (``pss``, what it holds
    with shared pages split) at the end, where the samples have it."""
    rows = [r for r in rows if r["rss_mb"]["tree"] > 0]
    warm = [r for r in rows if r["t"] - r["since"] >= WARMUP_S]
    fit = [r for r in warm if r["t"] >= span_s / 2]
    return {"rss_start_mb": warm[0]["rss_mb"]["tree"] if warm else None,
            "rss_end_mb": rows[-1]["rss_mb"]["tree"] if rows else None,
            "rss_peak_mb": max((r["rss_mb"]["tree"] for r in rows), default=None),
            "pss_end_mb": rows[-1]["rss_mb"].get("pss") if rows else None,
            "slope_mb_per_min": {k: slope([(r["start"], r["t"] / 60, r["rss_mb"][k])
                                           for r in fit if r["rss_mb"].get(k) is not None])
                                 for k in KINDS}}


class MemoryLog:
    """Each run's peak RSS since the last sample, every ``every`` seconds, appended to ``path``
    (JSON lines: run, ``t``, ``start``, ``since``, ``rss_mb``) as it is taken, so the samples
    of a long run are there to read when it is cut short.  A run is anything with ``starts``
    (which start it is in), ``since`` (when that start began, monotonic) and ``peaks()``
    (:class:`bench.harness.rss.Peaks`)."""

    def __init__(self, runs: Mapping[str, Any], path: Path, every: float) -> None:
        self.runs, self.path, self.every = runs, path, every
        self.rows: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
        self._taken = 0

    def sample(self, t: float, begin: float) -> None:
        """Sample every run if ``t`` (seconds since ``begin``) reached the next sample's time."""
        if t < self.every * (self._taken + 1):
            return
        self._taken += 1
        with self.path.open("a", encoding="utf-8") as out:
            for name, run in self.runs.items():
                row = {"t": t, "start": run.starts, "since": run.since - begin,
                       "rss_mb": run.peaks().mb()}
                self.rows[name].append(row)
                out.write(json.dumps({"run": name, **row}) + "\n")

    def trends(self) -> dict[str, dict[str, Any]]:
        """Each run's :func:`memory_trend` over the time sampled."""
        return {name: memory_trend(rows, rows[-1]["t"] if rows else 0.0)
                for name, rows in self.rows.items()}
