"""The harness the benchmarks share, one piece of code for what several of them do:

* :mod:`bench.harness.services`: the Kafka broker and the Redis database given, or the pip
  broker, a redis-server and a Spark Connect server started for a run and stopped with it;
  the services and work folder one run's contenders use; a run's failure as one line;
* :mod:`bench.harness.topics`: Kafka topics made fresh, filled, counted, and a thread writing
  the sample events at a steady rate;
* :mod:`bench.harness.topologies`: the shipped ``enrich.yaml`` and ``load.yaml`` pointed at
  fresh topics, and the check of what load.yaml leaves in Redis;
* :mod:`bench.harness.processes`: child processes (``sqe run``, the plain and quixstreams
  programs, the part-scripts) run to their end and timed, or started long-running, stopped
  gently or killed with everything under them; the progress file of an ``sqe run``;
* :mod:`bench.harness.rss`: the peak RSS of a process tree, sampled from ``/proc``;
* :mod:`bench.harness.cycles`: variants of one streaming query in the benchmark's own Spark
  session, measured by their batch cycles over interleaved repetitions, and their report;
* :mod:`bench.harness.report`: the options every benchmark takes, its report's tables and
  figures, and its last lines (the errors, the JSON object, the exit code).

This file holds what all of them use: the repository's folders and :class:`BenchError`.

May import: ``sqe`` and ``support``; nothing of ``bench`` outside the harness (the
scripts import the harness, never the other way round).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


class BenchError(Exception):
    """A benchmark cannot run as asked, or what it measured is wrong: one sentence."""


def rotate(items: tuple[str, ...], rep: int) -> tuple[str, ...]:
    """``items`` in the order of repetition ``rep``: each starts one repetition, in turn, so
    that what the machine does meanwhile falls on all of them alike."""
    k = rep % len(items)
    return items[k:] + items[:k]
