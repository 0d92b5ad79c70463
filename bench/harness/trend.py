"""Whether a long run's memory is flat: the RSS samples of a run that may have been started
again several times, and the slope of each kind of process's RSS over the second half, fitted
within each start (a restart's drop is not a trend).  ``bench/soak.py`` and
``bench/nemesis.py`` report it."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

#: A start's first minute (its JVM starting, its first batches) is left out of the slopes.
WARMUP_S = 60.0
KINDS = ("tree", "driver", "jvm", "workers")


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
    each kind (MB/min) over the span's second half."""
    rows = [r for r in rows if r["rss_mb"]["tree"] > 0]
    warm = [r for r in rows if r["t"] - r["since"] >= WARMUP_S]
    fit = [r for r in warm if r["t"] >= span_s / 2]
    return {"rss_start_mb": warm[0]["rss_mb"]["tree"] if warm else None,
            "rss_end_mb": rows[-1]["rss_mb"]["tree"] if rows else None,
            "rss_peak_mb": max((r["rss_mb"]["tree"] for r in rows), default=None),
            "slope_mb_per_min": {k: slope([(r["start"], r["t"] / 60, r["rss_mb"][k])
                                           for r in fit]) for k in KINDS}}
