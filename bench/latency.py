"""End-to-end latency of the long-running chain enrich -> load: SQE, plain programs, quixstreams.

    PYTHONPATH=. .venv/bin/python bench/latency.py [--rates 1000,5000,20000 | --rates none]
        [--seconds 30] [--backlog N] [--backlog-timeout S]
        [--systems sqe,plain,quix,quix-tuned] [--quix-python PATH] [--quix-tuned-interval 0.5]
        [--sqe-args ARGS] [--drain-timeout 180] [--start-timeout 600] [--out DIR] [--plot PNG]
        [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

It answers two questions in one command: how late an event is at a fixed rate (the rate runs,
``--rates``), and how many events a second the chain sustains once warm (the backlog runs,
``--backlog N``, after the rate runs; ``bench/sustained.py``).  ``--rates none`` (or ``''``)
runs the backlog only.  For example, every system, both questions::

    PYTHONPATH=. .venv/bin/python bench/latency.py --rates 1000,5000 --seconds 60 \\
        --backlog 2000000 --quix-python /tmp/quix/bin/python --out /tmp/lat --json

For every rate R of ``--rates`` and every system, one after the other on the same broker and
Redis: fresh source and enriched topics (4 partitions), the Redis database flushed, the chain
started as two long-running processes, then one warm-up event per source partition; once all of
them are in the store (both steps have done their first batch: start-up is not counted) and 2 s
more, R sample events per second for ``--seconds``.  ``bench/latency_timing.py`` stamps each
with its send time and each event's first arrival in ``load_log`` (a poller woken by Redis
keyspace notifications; its docstring has the design).  Latency = arrival - send.  The chain
then gets ``--drain-timeout`` seconds to deliver everything, its processes SIGTERM (SQE's runs
finish their batch), and every event id must be in ``load_log`` exactly once (and the region
hashes hold exactly what the events give, as bench/chain.py checks them).

Systems:

* ``sqe``: copies of ``topologies/enrich.yaml`` and ``load.yaml`` as ``sqe run`` processes
  without ``--once``, started as ``bench/soak.py`` starts them (``--config conf/local.yaml``,
  the services as ``--conf``), with Spark's default trigger (the next micro-batch as soon as the
  last one ends).  Its trigger interval, ``jw.sqe.trigger.intervalSeconds`` (a processing-time
  trigger: ``sqe/engine/run/triggers.py``, docs/running.md), is left unset, and there is no tuned
  SQE row: an interval trades latency for fewer, larger batches.  ``--sqe-args '--conf
  jw.sqe.trigger.intervalSeconds=2'`` gives one to both runs (and ``--conf
  jw.sqe.spout.kafka.maxRecordsPerBatch=N`` caps their batches).
* ``plain``: ``bench/plain_latency.py`` enrich and load (confluent-kafka and redis-py, a record
  handled as soon as it is polled; idempotent producer + HWMs in Redis, as bench/plain_chain.py).
* ``quix`` / ``quix-tuned``: ``bench/quix_chain.py`` enrich and load, two quixstreams
  exactly-once Applications (Kafka transactions), ``commit_interval`` 5 s (quixstreams' default)
  and ``--quix-tuned-interval``; run by ``--quix-python`` (a virtualenv with quixstreams 3 and
  redis, see bench/chain.py).  Without ``--quix-python`` these rows are skipped, saying so.

Per system and rate: events delivered, latency p50 / p99 / max, the p50 of the first and the
last third of the events (in send order), the events still in flight when sending ended, the
drain (send end to the last arrival), and whether the system held the rate: every event
delivered, at most 3 s of input still in flight when sending ended (a chain that fell behind
early has a flat but huge latency), and the last third's p50 at most 1.5 x the first third's
+ 0.5 s (``latency_timing.not_held``; a line says why for each rate not held).  Then the
highest rate each system held (of the rates given).

Per system over the backlog (``bench/sustained.py`` has the definitions): the **sustained
events/s** (the events that arrived between the 10th and the 90th percentile of the arrival
times, over that span), the whole backlog's rate (first send to last arrival), the producer's
rate, the time to the first arrival and, for ``sqe``, each step's median batch (records and
seconds); then SQE's sustained rate over quix's, quix-tuned's and plain's.  The backlog gets
``--backlog-timeout`` seconds to be sent and as many to arrive (default ``--drain-timeout`` + 1 s
per 1,000 events), and the same exactly-once checks.

Into ``--out``: ``latency.json`` (the rate rows, with per-second p50s, in ``rows``; the backlog
rows and ratios in ``backlog``), logs, checkpoints, topology copies, the services' data;
``--plot``: p50 and p99 against rate per system (log scales).  A pip broker and a redis-server
are started unless ``--brokers`` / ``--redis`` are given (that database is flushed before each
run; ``notify-keyspace-events`` is extended while a run lasts).  Exit 1 when an event is lost
(not delivered within the drain timeout) or duplicated, the store differs, or a process fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import sustained
from bench.harness.processes import quix_interpreter
from bench.harness.report import columns, finish, num, parse_list, parser, say, service_options
from bench.harness.services import kafka_and_redis, with_services
from bench.harness.topics import PARTITIONS
from bench.latency_chain import SYSTEMS, Bench, chain_run, cpu_per_million, sqe_batches
from bench.latency_timing import Producer, latencies, not_held


def one_run(system: str, rate: float, b: Bench) -> dict[str, Any]:
    """One system at one rate: the row of the report (``problems`` empty when all is well)."""
    seconds = b.args.seconds
    run = chain_run(system, f"at {rate:,g}/s for {seconds:g} s",
                    {"rate": rate, "seconds": seconds},
                    lambda topic: Producer(b.brokers, topic, rate, seconds, PARTITIONS),
                    seconds + 120, b.args.drain_timeout, b)
    row = run.row | {"producer_lag_ms": round(run.producer.lag_ns / 1e6, 1),
                     **latencies(run.producer, run.arrivals)}
    if system == "sqe":
        row["sqe_batches"] = sqe_batches(run.steps)
    return row


def held(rows: list[dict[str, Any]], system: str) -> float | None:
    """The highest rate ``system`` held: every event once, at most a few seconds of input in
    flight when sending ended, and no climbing latency (:func:`bench.latency_timing.not_held`)."""
    ok = [r["rate"] for r in rows if r["system"] == system and not r["problems"]
          and not_held(r) is None]
    return max(ok, default=None)


def report(result: dict[str, Any]) -> list[str]:
    """The lines of the report: the rate runs', the backlog's, what was skipped, where to look."""
    lines = rate_report(result) if result["rows"] else []
    if result["backlog"]:
        lines += sustained.report(result["backlog"])
    if result["quix_skipped"]:
        lines.append(f"quix, quix-tuned: skipped: {result['quix_skipped']}")
    return lines + [f"results: {result['out']}/latency.json; plot: {result['plot']}"]


def rate_report(result: dict[str, Any]) -> list[str]:
    """The rate runs' table, SQE's batches, the highest rate each system held."""
    cells = [("system", "rate/s", "sent", "delivered", "p50 s", "p99 s", "max s",
              "p50 1st/last third s", "p99 1st minute / after s", "in flight at end",
              "drain s", "CPU s/1M/hop", "cores", "held")]
    for r in result["rows"]:
        cpu = cpu_per_million(r, r.get("delivered", 0)) or {}
        cells.append((r["system"], f"{r['rate']:,g}", f"{r['sent']:,}",
                      f"{r.get('delivered', 0):,}", num(r.get("p50_s")), num(r.get("p99_s")),
                      num(r.get("max_s")), f"{num(r.get('p50_first_third_s'))} / "
                      f"{num(r.get('p50_last_third_s'))}",
                      f"{num(r.get('p99_first_minute_s'))} / "
                      f"{num(r.get('p99_after_minute_s'))}",
                      f"{r.get('in_flight_at_end', 0):,}", num(r.get("drain_s"), ".1f"),
                      num(cpu.get("chain_per_hop_s"), ".1f"), num(cpu.get("chain_cores"), ".2f"),
                      "-" if "grew" not in r else "yes" if not_held(r) is None else "NO"))
    lines = columns(cells)
    lines += [f"{r['system']} at {r['rate']:,g}/s not held: {not_held(r)}"
              for r in result["rows"] if "grew" in r and not_held(r) is not None]
    for r in result["rows"]:
        for step, b in r.get("sqe_batches", {}).items():
            lines.append(f"sqe at {r['rate']:,g}/s, {step}: {b['batches']} batches, median "
                         f"{num(b['duration_s_median'], '.2f')} s each, "
                         f"{num(b['cycle_s_median'], '.2f')} s start to start, "
                         f"largest {b['records_max']:,} records")
    return lines + ["highest rate held (of the rates given): " + "; ".join(
        f"{s} {'-' if v is None else format(v, ',g') + '/s'}"
        for s, v in result["held"].items())]


def plot(rows: list[dict[str, Any]], path: Path) -> str | None:
    """p50 and p99 against rate per system, log scales; None, or why there is no plot."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return "matplotlib is not installed (pip install 'sqe-spark[plot]')"
    fig = Figure(figsize=(9, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for k, system in enumerate(dict.fromkeys(r["system"] for r in rows)):
        pts = sorted((r["rate"], r["p50_s"], r["p99_s"], not_held(r) is not None) for r in rows
                     if r["system"] == system and r.get("p50_s"))
        if not pts:
            continue
        x = [p[0] for p in pts]
        ax.plot(x, [p[1] for p in pts], "o-", color=f"C{k}", label=f"{system} p50")
        ax.plot(x, [p[2] for p in pts], "s--", color=f"C{k}", alpha=0.7, label=f"{system} p99")
        lost = [p for p in pts if p[3]]
        ax.plot([p[0] for p in lost], [p[2] for p in lost], "x", color="black", ms=12)
    ax.set_xscale("log")
    rates = sorted({r["rate"] for r in rows})
    ax.set_xticks(rates, [f"{r:,g}" for r in rates])
    ax.set_yscale("log")
    ax.set_xlabel("input rate (events/s)")
    ax.set_ylabel("end-to-end latency (s), send to load_log")
    ax.set_title("chain enrich -> load, latency by rate (x: rate not held)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return None


def parse_rates(text: str) -> list[float]:
    if text.strip().lower() in ("", "none"):
        return []
    return parse_list(text, float, "--rates", "numbers", "rates over 0")


def parse_backlog(text: str) -> int:
    return parse_list(text, int, "--backlog", "a count", "a count of at least 1")[0]


def parse_systems(text: str) -> list[str]:
    systems = [part.strip() for part in text.split(",") if part.strip()]
    if "sqe-tuned" in systems:
        raise argparse.ArgumentTypeError(
            "there is no sqe-tuned row: give SQE a trigger interval with --sqe-args "
            "'--conf jw.sqe.trigger.intervalSeconds=SECONDS'")
    if not systems or set(systems) - set(SYSTEMS):
        raise argparse.ArgumentTypeError(f"--systems takes some of {','.join(SYSTEMS)}")
    return systems


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rates", type=parse_rates, default=[1000.0, 5000.0, 20000.0],
                    help="events per second, comma-separated (default 1000,5000,20000); "
                    "'' or none: no rate runs")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds of input per run")
    ap.add_argument("--backlog", type=parse_backlog, help="also send this many events per "
                    "system as fast as possible: sustained throughput (bench/sustained.py)")
    ap.add_argument("--backlog-timeout", type=float, help="seconds for sending the backlog, "
                    "and again for it to arrive (default --drain-timeout + 1 s per 1,000)")
    ap.add_argument("--systems", type=parse_systems, default=list(SYSTEMS),
                    help=f"comma-separated, of {','.join(SYSTEMS)} (default all)")
    ap.add_argument("--quix-python", help="a Python with quixstreams 3 and redis (the quix rows "
                                          "are skipped without it)")
    ap.add_argument("--quix-tuned-interval", type=float, default=0.5,
                    help="commit_interval of quix-tuned (default 0.5 s)")
    ap.add_argument("--sqe-args", default="", help="more arguments for both `sqe run` commands "
                    "(one string, split as a shell does), e.g. '--log-level debug'")
    ap.add_argument("--untyped", action="store_true", help="SQE's topologies without their "
                    "declared JSON fields (jw.sqe.spout.fields), as an original SQE file")
    ap.add_argument("--drain-timeout", type=float, default=180.0,
                    help="seconds the chain may take to deliver all once the input ends")
    ap.add_argument("--start-timeout", type=float, default=600.0,
                    help="seconds the chain may take to deliver the warm-up events")
    ap.add_argument("--out", type=Path, help="results, logs, checkpoints (default: a new /tmp dir)")
    ap.add_argument("--plot", type=Path, help="a PNG of p50 and p99 against rate per system")
    service_options(ap)
    ap.add_argument("--json", action="store_true", help="also print the results as JSON last")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.quix_tuned_interval <= 0 or (args.backlog_timeout or 1) <= 0:
        ap.error("--seconds, --quix-tuned-interval and --backlog-timeout must be over 0")
    if not args.rates and not args.backlog:
        ap.error("nothing to run: --rates none needs --backlog")
    skipped = None
    if {"quix", "quix-tuned"} & set(args.systems):
        python, info = quix_interpreter(args.quix_python) if args.quix_python else \
            (None, "no --quix-python given (a Python with quixstreams 3 and redis)")
        if python is None:
            skipped = info
            args.systems = [s for s in args.systems if not s.startswith("quix")]
            say(f"quix, quix-tuned: skipped: {info}")
        else:
            say(f"quixstreams {info} ({python})")
    out = (args.out or Path(tempfile.mkdtemp(prefix="sqe-latency-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def body(stack: ExitStack, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        b = Bench(args, *kafka_and_redis(stack, out / "services", args.brokers, args.redis), out,
                  say)
        rows: list[dict[str, Any]] = []
        for rate in args.rates:
            for system in args.systems:
                rows.append(row := one_run(system, rate, b))
                say(f"  {system} at {rate:g}/s: delivered {row.get('delivered', 0):,} of "
                    f"{row['sent']:,}, p50 {row.get('p50_s', float('nan')):.3f} s, p99 "
                    f"{row.get('p99_s', float('nan')):.3f} s"
                    + "".join(f"; error: {p}" for p in row["problems"]))
        return rows, sustained.run_backlog(args.systems, args.backlog, b) if args.backlog else None

    done = with_services(body, out=out)
    if done is None:
        return 1
    rows, backlog = done
    result = {"rates": args.rates, "seconds": args.seconds, "systems": args.systems,
              "quix_skipped": skipped, "out": str(out), "rows": rows,
              "held": {s: held(rows, s) for s in args.systems},
              "backlog": backlog,
              "problems": [f"{r['system']} at {r['rate']:g}/s: {p}" for r in rows
                           for p in r["problems"]]
              + [f"{r['system']} backlog of {r['backlog']:,}: {p}"
                 for r in (backlog or {}).get("rows", []) for p in r["problems"]]}
    no_plot = (plot(rows, args.plot) if rows else "no rate runs") if args.plot \
        else "not asked (--plot)"
    result["plot"] = str(args.plot) if args.plot and not no_plot else f"none: {no_plot}"
    (out / "latency.json").write_text(json.dumps(result, indent=1))
    summary = {**result, "rows": [{k: v for k, v in r.items() if not k.endswith("_by_second_s")}
                                  for r in rows]}
    return finish(report(result), result["problems"], summary if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
