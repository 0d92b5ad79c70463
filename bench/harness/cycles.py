"""Variants of one streaming query measured by their batch cycles in the benchmark's own Spark
session (``bench/hop_cost.py``, ``bench/join_cost.py``): the options they take
(:func:`cycle_options`), the session (:func:`local_spark`), the cycle of a run (:func:`cycle`
of :func:`progress_starts`), the repetitions interleaved with their order rotated
(:func:`interleaved`), and the report: per variant the median cycle, the records per second
it sustains and the ratio to the baseline variant (:func:`report_cycles`)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime
from typing import Any

from bench.harness import BenchError, rotate
from bench.harness.report import parser, service_options
from bench.harness.services import flush


def cycle_args(doc: str, argv: list[str] | None, records: int, batches: int, repeat: int
               ) -> argparse.Namespace:
    """The command line of a benchmark of batch cycles (its usage in ``doc``): ``--records``
    (a batch's cap), ``--batches`` (after the first), ``--repeat``, the services
    (``--brokers``, ``--redis``) and ``--json``; Spark's Python workers run this interpreter."""
    ap = parser(doc)
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--repeat", type=int, default=repeat)
    service_options(ap)
    ap.add_argument("--json", action="store_true")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return ap.parse_args(argv)


def local_spark(stack: ExitStack) -> Any:
    """A local Spark session on two cores (no UI, two shuffle partitions), stopped by
    ``stack``."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    stack.callback(spark.stop)
    return spark


def cycle(starts: list[float]) -> float:
    """The median time between batch starts, the first batch left out (the JVM's warm-up)."""
    gaps = [b - a for a, b in zip(starts[1:], starts[2:], strict=False)]
    if not gaps:
        raise BenchError("fewer than three batches ran: raise --batches")
    return statistics.median(gaps)


def progress_starts(query: Any) -> list[float]:
    """The start of each batch of ``query`` that read records, by Spark's progress."""
    return [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
            for p in query.recentProgress if p["numInputRows"]]


def interleaved(variants: Sequence[str], repeat: int, redis_url: str,
                run: Callable[[str, str], float], check: Callable[[str], None]
                ) -> dict[str, list[float]]:
    """``run(variant, tag)`` of each variant ``repeat`` times, each repetition in the order
    :func:`~bench.harness.rotate` gives, Redis flushed before each run and its output checked
    after (``check(variant)`` raises :class:`~bench.harness.BenchError`), each cycle said on
    stderr; the cycles per variant."""
    cycles: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(repeat):
        for variant in rotate(tuple(variants), rep):
            flush(redis_url)
            cycles[variant].append(run(variant, f"{variant}{rep}"))
            check(variant)
            print(f"  {variant} (repetition {rep + 1}): cycle {cycles[variant][-1]:.3f} s",
                  file=sys.stderr, flush=True)
    return cycles


def report_cycles(cycles: dict[str, list[float]], base: str, per_batch: int, a: Any,
                  heading: str, extra: dict[str, Any] | None = None) -> None:
    """Print per variant the median cycle, the ``per_batch`` records a batch over it, and its
    ratio to variant ``base``: as lines under ``heading``, or (``a.json``) as one JSON object
    (``records``, ``batches``, ``variants``, and ``extra``)."""
    base_cycle = statistics.median(cycles[base])
    out = {}
    for v, c in cycles.items():
        median = statistics.median(c)
        out[v] = {"cycle_s": round(median, 3), "records_per_s": round(per_batch / median),
                  "ratio": round(median / base_cycle, 2)}
    if a.json:
        print(json.dumps({"records": a.records, "batches": a.batches, **(extra or {}),
                          "variants": out}))
        return
    print(f"{heading} ({a.batches} after the first), median of {a.repeat}:")
    for v, r in out.items():
        print(f"  {v:13} cycle {r['cycle_s']:.3f} s  {r['records_per_s']:>7,}/s  "
              f"{r['ratio']:.2f}x {base}")
