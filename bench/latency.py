"""End-to-end latency of the long-running chain enrich -> load: SQE, plain programs, quixstreams.

    PYTHONPATH=. .venv/bin/python bench/latency.py [--rates 1000,5000,20000] [--seconds 30]
        [--systems sqe,plain,quix,quix-tuned] [--quix-python PATH] [--quix-tuned-interval 0.5]
        [--drain-timeout 180] [--start-timeout 600] [--out DIR] [--plot PNG]
        [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

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
  last one ends).  SQE has no trigger-interval option (``sqe options``, ``sqe run --help``;
  ``sqe/engine/runner.py`` sets ``trigger(availableNow=True)`` for ``--once`` only), so there is
  no tuned SQE row; ``maxRecordsPerBatch`` only caps a batch.
* ``plain``: ``bench/plain_latency.py`` enrich and load (confluent-kafka and redis-py, a record
  handled as soon as it is polled; idempotent producer + HWMs in Redis, as bench/plain_chain.py).
* ``quix`` / ``quix-tuned``: ``bench/quix_chain.py`` enrich and load, two quixstreams
  exactly-once Applications (Kafka transactions), ``commit_interval`` 5 s (quixstreams' default)
  and ``--quix-tuned-interval``; run by ``--quix-python`` (a virtualenv with quixstreams 3 and
  redis, see bench/chain.py).  Without ``--quix-python`` these rows are skipped, saying so.

Per system and rate: events delivered, latency p50 / p99 / max, the p50 of the first and the
last third of the events (in send order), the events still in flight when sending ended, the
drain (send end to the last arrival); "backlog grew" when the last third's p50 exceeds 1.5 x the
first third's + 0.5 s.  Then the highest rate each system held without a growing backlog (of
the rates given).  Into ``--out``: ``latency.json`` (with per-second p50s), logs, checkpoints,
topology copies, the services' data; ``--plot``: p50 and p99 against rate per system (log
scales).  A pip broker and a redis-server are started unless ``--brokers`` / ``--redis`` are
given (that database is flushed before each run; ``notify-keyspace-events`` is extended while
a run lasts).  Exit 1 when an event is lost (not delivered within the drain timeout) or
duplicated, the store differs, or a process fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, Protocol

import chain
import soak
from kafka_write import BenchError
from latency_timing import Arrivals, Producer, latencies
from local_redis import local_services

from sqe.errors import SqeError

SYSTEMS = ("sqe", "plain", "quix", "quix-tuned")
QUIX_DEFAULT_INTERVAL = 5.0
SETTLE_S = 2.0


class Step(Protocol):
    name: str

    def start(self, now: float) -> None: ...
    def end(self, graceful: bool = False) -> int | None: ...
    def died(self) -> str | None: ...


class Program:
    """A long-running step that is not ``sqe run`` (plain or quixstreams), in its own group."""

    def __init__(self, name: str, command: list[str], logs: Path) -> None:
        self.name, self.command, self.logs = name, command, logs
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, now: float = 0.0) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{self.name}.err", "wb") as err, \
                open(self.logs / f"{self.name}.out", "wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, env=chain.child_env(),
                                            cwd=chain.ROOT, start_new_session=True)

    def end(self, graceful: bool = False) -> int | None:
        """SIGTERM (when ``graceful``; 60 s at most), then SIGKILL to its group; its exit code."""
        if self.process is None:
            return None
        with suppress(ProcessLookupError, subprocess.TimeoutExpired):
            if graceful:
                self.process.send_signal(signal.SIGTERM)
                self.process.wait(60)
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        code, self.process = self.process.wait(), None
        return code

    def died(self) -> str | None:
        if self.process is None or self.process.poll() is None:
            return None
        return f"{self.name} exited {self.end()}: {soak.last_error(self.logs / f'{self.name}.err')}"


def make_chain(system: str, source: str, enriched: str, tag: str, args: argparse.Namespace,
               brokers: str, redis_url: str, out: Path) -> list[Step]:
    """The two long-running steps of ``system`` (enrich first), not started yet."""
    steps: list[Step]
    if system == "sqe":
        from sqe.cli.local_services import service_conf

        conf = service_conf(brokers, redis_url) + shlex.split(args.sqe_args)
        runs = [soak.Topology(f"lat_{step}_{tag}", chain.topology_copy(step, src, sink, out),
                              src, out, conf)
                for step, src, sink in (("enrich", source, enriched), ("load", enriched, None))]
        steps = list(runs)
    else:
        quix = system != "plain"
        python = args.quix_python if quix else sys.executable
        script = str(chain.BENCH / ("quix_chain.py" if quix else "plain_latency.py"))
        interval = args.quix_tuned_interval if system == "quix-tuned" else QUIX_DEFAULT_INTERVAL
        steps = []
        for step, src, where in (("enrich", source, ["--sink", enriched]),
                                 ("load", enriched, ["--redis", redis_url])):
            extra = (["--commit-interval", str(interval), "--state-dir",
                      str(out / "quix" / f"{step}_{tag}")] if quix else [])
            steps.append(Program(f"{system}_{step}_{tag}", [
                python, script, step, "--brokers", brokers, "--source", src, *where,
                "--group", f"lat-{step}-{tag}", *extra], out / "logs"))
    return steps


def wait_for(done: Callable[[], bool], steps: list[Step], timeout: float) -> bool:
    """Wait until ``done()`` (True) or ``timeout`` (False); a step that died is a BenchError."""
    deadline = time.monotonic() + timeout
    while not done():
        for s in steps:
            if why := s.died():
                raise BenchError(why)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def sqe_batches(steps: list[Step]) -> dict[str, Any]:
    """Per SQE step: its batches during the run, their median duration and start-to-start."""
    out = {}
    for s in steps:
        if isinstance(s, soak.Topology):
            b = chain.read_progress(s.checkpoint)
            cycles = [y["started"] - x["started"] for x, y in zip(b, b[1:], strict=False)]
            out[s.name.split("_")[1]] = {
                "batches": len(b), "duration_s_median": statistics.median(
                    [x["duration_s"] for x in b]) if b else None,
                "cycle_s_median": statistics.median(cycles) if cycles else None,
                "records_max": max((x["records_read"] for x in b), default=0)}
    return out


def one_run(system: str, rate: float, args: argparse.Namespace, brokers: str, redis_url: str,
            out: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """One system at one rate: the row of the report (``problems`` empty when all is well)."""
    tag = f"{system.replace('-', '')}_{rate:g}_{uuid.uuid4().hex[:6]}"
    source = chain.new_topic(brokers, f"lat-{system}-events")
    enriched = chain.new_topic(brokers, f"lat-{system}-enriched")
    chain.flush(redis_url)
    row: dict[str, Any] = {"system": system, "rate": rate, "seconds": args.seconds,
                           "problems": []}
    steps = make_chain(system, source, enriched, tag, args, brokers, redis_url, out)
    arrivals = Arrivals(redis_url, chain.PARTITIONS)
    producer = Producer(brokers, source, rate, args.seconds, chain.PARTITIONS)
    began = time.monotonic()
    try:
        for s in steps:
            s.start(0.0)
            if isinstance(s, soak.Topology) and s.sampler is not None:
                s.sampler.stop()  # no RSS sampling here: less load on the machine
                s.sampler = None
        arrivals.start()
        producer.warm_up()
        warm = [f"e{i}" for i in range(producer.warm)]
        if not wait_for(lambda: all(w in arrivals.first for w in warm), steps,
                        args.start_timeout):
            raise BenchError(f"{system}: the warm-up events did not reach the store in "
                             f"{args.start_timeout:g} s")
        row["start_s"] = round(time.monotonic() - began, 1)
        say(f"  {system} at {rate:g}/s: started in {row['start_s']} s ({arrivals.mode}); "
            f"sending for {args.seconds:g} s")
        time.sleep(SETTLE_S)
        producer.start()
        wait_for(lambda: not producer.is_alive(), steps, args.seconds + 120)
        drained = wait_for(lambda: len(arrivals.first) >= producer.sent, steps,
                           args.drain_timeout)
        if not drained:
            row["problems"].append(f"{producer.sent - len(arrivals.first):,} events not "
                                   f"delivered within {args.drain_timeout:g} s of the end")
        time.sleep(0.5)  # late duplicates, if any, reach the poller
    except BenchError as exc:
        row["problems"].append(str(exc))
    finally:
        producer.halt.set()
        row["stop_codes"] = {s.name: s.end(graceful=True) for s in reversed(steps)}
        arrivals.stop()
    want = chain.expected_store(producer.sent)
    with chain.redis_client(redis_url) as client:
        logged = Counter(v.decode() for v in client.hvals("load_log"))
    counts = {"lost": len(want.ids - logged.keys()), "unknown": len(logged.keys() - want.ids),
              "duplicated": sum(n - 1 for n in logged.values() if n > 1)}
    row["problems"] += [e for e in (producer.error, arrivals.error) if e]
    row["problems"] += [f"{n:,} event ids {k} in load_log" for k, n in counts.items() if n]
    row["problems"] += chain.check_store(redis_url, want)
    row |= {"sent": producer.sent - producer.warm, "warm_up": producer.warm, **counts,
            "producer_lag_ms": round(producer.lag_ns / 1e6, 1), "poller_wakes": arrivals.wakes,
            "poller_resyncs": arrivals.resyncs, **latencies(producer, arrivals)}
    if system == "sqe":
        row["sqe_batches"] = sqe_batches(steps)
    return row


def held(rows: list[dict[str, Any]], system: str) -> float | None:
    """The highest rate ``system`` held: every event once, and no growing backlog."""
    ok = [r["rate"] for r in rows if r["system"] == system and not r["problems"]
          and r.get("delivered") and not r["grew"]]
    return max(ok, default=None)


def report(result: dict[str, Any]) -> list[str]:
    def num(v: Any, fmt: str = ".3f") -> str:
        return "-" if v is None else format(v, fmt)

    cells = [("system", "rate/s", "sent", "delivered", "p50 s", "p99 s", "max s",
              "p50 1st/last third s", "in flight at end", "drain s", "backlog grew")]
    for r in result["rows"]:
        cells.append((r["system"], f"{r['rate']:,g}", f"{r['sent']:,}",
                      f"{r.get('delivered', 0):,}", num(r.get("p50_s")), num(r.get("p99_s")),
                      num(r.get("max_s")), f"{num(r.get('p50_first_third_s'))} / "
                      f"{num(r.get('p50_last_third_s'))}",
                      f"{r.get('in_flight_at_end', 0):,}", num(r.get("drain_s"), ".1f"),
                      "-" if "grew" not in r else "YES" if r["grew"] else "no"))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(t.rjust(w) if i else t.ljust(w) for i, (t, w) in
                       enumerate(zip(c, widths, strict=True))) for c in cells]
    for r in result["rows"]:
        for step, b in r.get("sqe_batches", {}).items():
            lines.append(f"sqe at {r['rate']:,g}/s, {step}: {b['batches']} batches, median "
                         f"{num(b['duration_s_median'], '.2f')} s each, "
                         f"{num(b['cycle_s_median'], '.2f')} s start to start, "
                         f"largest {b['records_max']:,} records")
    lines.append("highest rate without a growing backlog (of the rates given): " + "; ".join(
        f"{s} {'-' if v is None else format(v, ',g') + '/s'}"
        for s, v in result["held"].items()))
    if result["quix_skipped"]:
        lines.append(f"quix, quix-tuned: skipped: {result['quix_skipped']}")
    return lines + [f"results: {result['out']}/latency.json; plot: {result['plot']}"]


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
        pts = sorted((r["rate"], r["p50_s"], r["p99_s"], r["grew"]) for r in rows
                     if r["system"] == system and r.get("p50_s"))
        if not pts:
            continue
        x = [p[0] for p in pts]
        ax.plot(x, [p[1] for p in pts], "o-", color=f"C{k}", label=f"{system} p50")
        ax.plot(x, [p[2] for p in pts], "s--", color=f"C{k}", alpha=0.7, label=f"{system} p99")
        grew = [p for p in pts if p[3]]
        ax.plot([p[0] for p in grew], [p[2] for p in grew], "x", color="black", ms=12)
    ax.set_xscale("log")
    rates = sorted({r["rate"] for r in rows})
    ax.set_xticks(rates, [f"{r:,g}" for r in rates])
    ax.set_yscale("log")
    ax.set_xlabel("input rate (events/s)")
    ax.set_ylabel("end-to-end latency (s), send to load_log")
    ax.set_title("chain enrich -> load, latency by rate (x: backlog grew)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return None


def parse_rates(text: str) -> list[float]:
    return chain.parse_list(text, float, "--rates", "numbers", "rates over 0")


def parse_systems(text: str) -> list[str]:
    systems = [part.strip() for part in text.split(",") if part.strip()]
    if "sqe-tuned" in systems:
        raise argparse.ArgumentTypeError("there is no sqe-tuned: SQE has no trigger interval "
                                         "option (its runs use Spark's default trigger)")
    if not systems or set(systems) - set(SYSTEMS):
        raise argparse.ArgumentTypeError(f"--systems takes some of {','.join(SYSTEMS)}")
    return systems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rates", type=parse_rates, default=[1000.0, 5000.0, 20000.0],
                    help="events per second, comma-separated (default 1000,5000,20000)")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds of input per run")
    ap.add_argument("--systems", type=parse_systems, default=list(SYSTEMS),
                    help=f"comma-separated, of {','.join(SYSTEMS)} (default all)")
    ap.add_argument("--quix-python", help="a Python with quixstreams 3 and redis (the quix rows "
                                          "are skipped without it)")
    ap.add_argument("--quix-tuned-interval", type=float, default=0.5,
                    help="commit_interval of quix-tuned (default 0.5 s)")
    ap.add_argument("--sqe-args", default="", help="more arguments for both `sqe run` commands "
                    "(one string, split as a shell does), e.g. '--log-level debug'")
    ap.add_argument("--drain-timeout", type=float, default=180.0,
                    help="seconds the chain may take to deliver all once the input ends")
    ap.add_argument("--start-timeout", type=float, default=600.0,
                    help="seconds the chain may take to deliver the warm-up events")
    ap.add_argument("--out", type=Path, help="results, logs, checkpoints (default: a new /tmp dir)")
    ap.add_argument("--plot", type=Path, help="a PNG of p50 and p99 against rate per system")
    ap.add_argument("--brokers", help="a Kafka broker; default: start the local pip broker")
    ap.add_argument("--redis", help="a Redis URL with a database to flush; default: start one")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON last")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.quix_tuned_interval <= 0:
        ap.error("--seconds and --quix-tuned-interval must be over 0")
    say = lambda text: print(text, flush=True)  # noqa: E731
    skipped = None
    if {"quix", "quix-tuned"} & set(args.systems):
        python, info = chain.quix_interpreter(args.quix_python) if args.quix_python else \
            (None, "no --quix-python given (a Python with quixstreams 3 and redis)")
        if python is None:
            skipped = info
            args.systems = [s for s in args.systems if not s.startswith("quix")]
            say(f"quix, quix-tuned: skipped: {info}")
        else:
            say(f"quixstreams {info} ({python})")
    out = (args.out or Path(tempfile.mkdtemp(prefix="sqe-latency-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        try:
            brokers, redis_url = local_services(stack, out / "services", args.brokers, args.redis)
            for rate in args.rates:
                for system in args.systems:
                    rows.append(row := one_run(system, rate, args, brokers, redis_url, out, say))
                    say(f"  {system} at {rate:g}/s: delivered {row.get('delivered', 0):,} of "
                        f"{row['sent']:,}, p50 {row.get('p50_s', float('nan')):.3f} s, p99 "
                        f"{row.get('p99_s', float('nan')):.3f} s"
                        + "".join(f"; error: {p}" for p in row["problems"]))
        except (BenchError, SqeError, ConnectionError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    result = {"rates": args.rates, "seconds": args.seconds, "systems": args.systems,
              "quix_skipped": skipped, "out": str(out), "rows": rows,
              "held": {s: held(rows, s) for s in args.systems},
              "problems": [f"{r['system']} at {r['rate']:g}/s: {p}" for r in rows
                           for p in r["problems"]]}
    no_plot = plot(rows, args.plot) if args.plot else "not asked (--plot)"
    result["plot"] = str(args.plot) if args.plot and not no_plot else f"none: {no_plot}"
    (out / "latency.json").write_text(json.dumps(result, indent=1))
    summary = {**result, "rows": [{k: v for k, v in r.items() if k != "p50_by_second_s"}
                                  for r in rows]}
    return chain.finish(report(result), result, summary if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
