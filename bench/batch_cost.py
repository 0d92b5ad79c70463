"""What one micro-batch of a given size costs: enrich and load in steady batches, per variant.

    PYTHONPATH=. .venv/bin/python bench/batch_cost.py [--records 2000] [--batches 15]
        [--repeat 2] [--variant NAME=CONFIG.yaml|TREE ...] [--brokers HOST:PORT]
        [--redis redis://HOST:PORT/DB] [--json]

A stream under a steady input runs batches of about what arrived while the last one ran, so
what an event waits for is the batch's fixed cost plus its per-record cost at that size
(bench/latency.py measures the wait itself).  This benchmark isolates the batch: it writes
``--records`` x (``--batches`` + 1) sample events to a fresh 4-partition topic, then, per
variant and repetition (interleaved, the order rotated each repetition), runs ``sqe run
--once`` of the shipped enrich.yaml over it and of load.yaml over enrich's output, each with
``jw.sqe.spout.kafka.maxRecordsPerBatch`` = ``--records``, so both run ``--batches`` + 1
batches of that size.  The first batch of each run is left out (it pays the JVM's warm-up).
Each run's output is checked as bench/chain.py checks the chain's: one enriched record per
event, and the Redis store exactly what the events give.

Per step and variant: the median over repetitions of the median batch duration (SQE's
``foreachBatch``, from the progress file) and of the cycle (one batch's start to the next's:
the batch plus Spark's own work between batches), the records per second that cycle
sustains (``--records`` over it: at large ``--records``, the step's sustained throughput once
warm), and the ratio of the cycle to the ``default`` variant's.

``default`` (this tree's code, ``--config conf/local.yaml`` and the services) always runs;
each ``--variant NAME=FILE`` adds ``--config FILE`` to both runs (a ``SQE:`` map of options,
a ``Spark:`` map of Spark settings), ``--variant NAME=DIR`` runs the ``sqe`` package of
another source tree (an earlier commit: ``git worktree add DIR REV``), and ``--connect`` adds
the variant ``connect``: this tree over a Spark Connect server (started for the run unless
``--remote`` names one), so its ratio is a hop's cycle over Connect against the classic one.
Exit 1 when a run fails or its output is wrong.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

from bench.harness import BenchError, rotate
from bench.harness.report import finish, parser, say, service_options
from bench.harness.services import Services, flush, with_services
from bench.harness.topics import PARTITIONS, create_topic
from bench.harness.topologies import Size, check_chain, expected_store, topology_copy

STEPS = ("enrich", "load")


def parse_variant(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    where = Path(path)
    if not sep or not name.strip() or not (where.is_file() or (where / "sqe").is_dir()):
        raise argparse.ArgumentTypeError(f"--variant takes NAME=CONFIG.yaml (an existing file) "
                                         f"or NAME=DIR (a tree with an sqe package), got "
                                         f"{text!r}")
    if name.strip() == "default":
        raise argparse.ArgumentTypeError("--variant: the name default is the run without a file")
    return name.strip(), Path(path)


def one_chain(s: Services, size: Size, records: int, variant: str,
              where: Path | None, remote: bool = False) -> dict[str, dict[str, float]]:
    """enrich then load of ``variant``, each ``sqe run --once`` in batches of ``records``
    (over the Spark Connect server when ``remote``); per step the median batch duration and
    cycle of the batches after the first."""
    tag = f"{variant}_{uuid.uuid4().hex[:6]}"
    enriched = create_topic(s.brokers, "bench-cost-enriched")
    flush(s.redis_url)
    config = where if where is not None and where.is_file() else None
    tree = where if where is not None and where.is_dir() else None
    extra = ["--conf", f"jw.sqe.spout.kafka.maxRecordsPerBatch={records}",
             *(["--config", str(config)] if config is not None else [])]
    out: dict[str, dict[str, float]] = {}
    for step, source, sink in (("enrich", size.topic, enriched), ("load", enriched, None)):
        run = s.sqe_run(topology_copy(step, source, sink, s.work), f"cost_{step}_{tag}",
                        s.work / "checkpoints" / f"{step}_{tag}", "--once", *extra, tree=tree,
                        remote=remote)
        later = run.batches[1:]
        if len(later) < 2:
            raise BenchError(f"{variant} {step}: only {len(run.batches)} batches")
        cycles = [b["started"] - a["started"] for a, b in zip(later, later[1:], strict=False)]
        out[step] = {"duration_s": statistics.median(b["duration_s"] for b in later),
                     "cycle_s": statistics.median(cycles), "batches": len(run.batches),
                     "records_max": max(b["records_read"] for b in later)}
    check_chain(s, size, enriched, f"{variant} enrich.yaml", f"{variant} load.yaml")
    return out


def measure(args: argparse.Namespace, s: Services) -> dict[str, Any]:
    from sqe.cli.sample_events import produce_events

    events = args.records * (args.batches + 1)
    topic = create_topic(s.brokers, "bench-cost-events")
    produce_events(s.brokers, topic, events, partitions=PARTITIONS)
    size = Size(events, topic, expected_store(events))
    variants: dict[str, Path | None] = {"default": None, **dict(args.variant)}
    if s.connect is not None:
        variants["connect"] = None
    runs: dict[str, list[dict[str, dict[str, float]]]] = {v: [] for v in variants}
    for rep in range(args.repeat):
        for name in rotate(tuple(variants), rep):
            got = one_chain(s, size, args.records, name, variants[name],
                            remote=name == "connect")
            runs[name].append(got)
            say(f"  {name} #{rep + 1}: " + ", ".join(
                f"{step} {got[step]['cycle_s']:.2f} s a batch ({got[step]['duration_s']:.2f} s "
                "in foreachBatch)" for step in STEPS))
    rows = []
    for name, reps in runs.items():
        for step in STEPS:
            cycle = statistics.median(r[step]["cycle_s"] for r in reps)
            rows.append({"variant": name, "step": step, "cycle_s": cycle,
                         "duration_s": statistics.median(r[step]["duration_s"] for r in reps),
                         "records_per_s": args.records / cycle})
    base = {r["step"]: r["cycle_s"] for r in rows if r["variant"] == "default"}
    for r in rows:
        r["ratio_to_default"] = r["cycle_s"] / base[r["step"]]
    return {"records": args.records, "batches": args.batches, "repeat": args.repeat,
            "variants": {k: str(v) if v else None for k, v in variants.items()}, "rows": rows,
            "runs": runs, "problems": []}


def table(result: dict[str, Any]) -> list[str]:
    lines = [f"batches of {result['records']:,} records, median of {result['repeat']} runs of "
             f"{result['batches']} batches each (the first batch of a run left out)",
             f"{'variant':16} {'step':7} {'cycle s':>8} {'in batch s':>10} {'records/s':>10} "
             f"{'x default':>9}"]
    for r in result["rows"]:
        lines.append(f"{r['variant']:16} {r['step']:7} {r['cycle_s']:8.2f} {r['duration_s']:10.2f} "
                     f"{r['records_per_s']:10,.0f} {r['ratio_to_default']:9.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=2000, help="records per micro-batch")
    ap.add_argument("--batches", type=int, default=15, help="batches per run after the first")
    ap.add_argument("--repeat", type=int, default=2, help="runs of every variant")
    ap.add_argument("--variant", type=parse_variant, action="append", default=[],
                    metavar="NAME=CONFIG.yaml|DIR",
                    help="a variant: both runs get --config FILE, or run DIR's sqe package")
    service_options(ap)
    ap.add_argument("--connect", action="store_true",
                    help="also run this tree over Spark Connect (variant connect; a server is "
                         "started unless --remote names one)")
    ap.add_argument("--remote", help="the Spark Connect server of --connect (sc://HOST:PORT)")
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)
    if args.remote and not args.connect:
        ap.error("--remote names the server of --connect")
    if args.records < 1 or args.batches < 3 or args.repeat < 1:
        ap.error("--records and --repeat must be at least 1, --batches at least 3")

    result = with_services(lambda stack, work: measure(args, Services.start(
        stack, work, args.brokers, args.redis, args.connect, args.remote)), "sqe-bench-cost-")
    if result is None:
        return 1
    return finish(table(result), result["problems"], result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
