"""One system's chain enrich -> load as two long-running processes, for bench/latency.py's rate
runs and bench/sustained.py's backlog: started, warmed up, fed, stopped and checked.

:func:`chain_run` is the one sequence both modes share: fresh source and enriched topics (4
partitions), the Redis database flushed, the two steps started (:func:`make_chain`; ``sqe``,
``plain``, ``quix`` or ``quix-tuned``, as bench/latency.py's docstring describes them), one
warm-up event per source partition, and once all of them are in the store (both steps have done
their first batch: start-up is not counted) and 2 s more, the events of the caller's
:class:`~bench.latency_timing.Producer`.  Then the chain gets ``drain_s`` seconds to deliver every
event, its processes SIGTERM (SQE's runs finish their batch), and every event id must be in
``load_log`` exactly once, the region hashes holding exactly what the events give (as
bench/chain.py checks them).  What went wrong is in the row's ``problems``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from bench.harness import BENCH, BenchError
from bench.harness.cpu import CpuMeter, service_pids
from bench.harness.processes import Background, SqeProcess, read_progress
from bench.harness.services import flush
from bench.harness.topics import PARTITIONS, create_topic
from bench.harness.topologies import count_events, topology_copy
from bench.latency_timing import Arrivals, Producer

SYSTEMS = ("sqe", "plain", "quix", "quix-tuned")
QUIX_DEFAULT_INTERVAL = 5.0
SETTLE_S = 2.0


class Step(Protocol):
    name: str
    process: Any  # its Popen while it runs

    def start(self, now: float) -> None: ...
    def end(self, graceful: bool = False) -> int | None: ...
    def died(self) -> str | None: ...


@dataclass
class Bench:
    """What every run of one invocation shares: the options, the services, the output folder."""

    args: argparse.Namespace
    brokers: str
    redis_url: str
    out: Path
    say: Callable[[str], None]


@dataclass
class Run:
    """One finished, checked run: its row so far and the clocks that timed it."""

    row: dict[str, Any]
    producer: Producer
    arrivals: Arrivals
    steps: list[Step]
    sending_began: float  # time.time() as the producer started (the progress files' clock)


def make_chain(system: str, source: str, enriched: str, tag: str, b: Bench) -> list[Step]:
    """The two long-running steps of ``system`` (enrich first), not started yet."""
    args, out = b.args, b.out
    steps: list[Step]
    if system == "sqe":
        from sqe.cli.local_services import service_conf

        conf = service_conf(b.brokers, b.redis_url) + shlex.split(args.sqe_args)
        # no RSS sampling here: less load on the machine
        runs = [SqeProcess(f"lat_{step}_{tag}", topology_copy(step, src, sink, out, args.untyped), src, out,
                           conf, rss_every=None)
                for step, src, sink in (("enrich", source, enriched), ("load", enriched, None))]
        steps = list(runs)
    else:
        quix = system != "plain"
        python = args.quix_python if quix else sys.executable
        script = str(BENCH / ("quix_chain.py" if quix else "plain_latency.py"))
        interval = args.quix_tuned_interval if system == "quix-tuned" else QUIX_DEFAULT_INTERVAL
        steps = []
        for step, src, where in (("enrich", source, ["--sink", enriched]),
                                 ("load", enriched, ["--redis", b.redis_url])):
            extra = (["--commit-interval", str(interval), "--state-dir",
                      str(out / "quix" / f"{step}_{tag}")] if quix else [])
            steps.append(Background(f"{system}_{step}_{tag}", [
                python, script, step, "--brokers", b.brokers, "--source", src, *where,
                "--group", f"lat-{step}-{tag}", *extra], out / "logs"))
    return steps


def service_ports(b: Bench) -> list[int]:
    """The ports of the broker and Redis the chain runs against."""
    return [int(b.brokers.rsplit(":", 1)[1]), urlsplit(b.redis_url).port or 6379]


def cpu_per_million(row: dict[str, Any], events: int) -> dict[str, float] | None:
    """CPU seconds per 1,000,000 events, per hop (the chain's processes) and of the shared
    broker and Redis, over a run's ``cpu`` window; and the chain's mean cores in it."""
    cpu = row.get("cpu")
    if not cpu or not events:
        return None
    return {"chain_per_hop_s": round(cpu["chain_s"] / events * 1e6 / 2, 2),
            "services_s": round(cpu["services_s"] / events * 1e6, 2),
            "chain_cores": round(cpu["chain_s"] / cpu["window_s"], 2)}


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


def arrived(arrivals: Arrivals) -> int:
    """The events the poller has seen; a poller that stopped on an error is a BenchError."""
    if arrivals.error and not arrivals.is_alive():
        raise BenchError(arrivals.error)
    return len(arrivals.first)


def sqe_batches(steps: list[Step], since: float | None = None) -> dict[str, Any]:
    """Per SQE step: its batches during the run (those started at ``since``, a ``time.time()``,
    or later, when given), their median duration and size, and start-to-start."""
    out = {}
    for s in steps:
        if isinstance(s, SqeProcess):
            b = [x for x in read_progress(s.checkpoint)
                 if since is None or x["started"] >= since]
            cycles = [y["started"] - x["started"] for x, y in zip(b, b[1:], strict=False)]
            out[s.name.split("_")[1]] = {
                "batches": len(b), "duration_s_median": statistics.median(
                    [x["duration_s"] for x in b]) if b else None,
                "cycle_s_median": statistics.median(cycles) if cycles else None,
                "records_median": statistics.median(
                    [x["records_read"] for x in b]) if b else None,
                "records_max": max((x["records_read"] for x in b), default=0)}
    return out


def chain_run(system: str, what: str, row: dict[str, Any], make: Callable[[str], Producer],
              send_s: float, drain_s: float, b: Bench) -> Run:
    """Run ``system``'s chain as the module docstring says, fed by ``make(source topic)``:
    ``send_s`` seconds for the producer to finish, then ``drain_s`` for every event to arrive.
    ``what`` names the run (``at 1,000/s for 30 s``) and ``row`` holds its first fields (after
    ``system``); the returned row adds the start-up time, the exit codes, the counts and the
    problems, every check done."""
    args = b.args
    label = "".join(c for c in what if c.isalnum())
    tag = f"{system.replace('-', '')}_{label}_{uuid.uuid4().hex[:6]}"
    source = create_topic(b.brokers, f"lat-{system}-events")
    enriched = create_topic(b.brokers, f"lat-{system}-enriched")
    flush(b.redis_url)
    row = {"system": system, **row, "problems": []}
    steps = make_chain(system, source, enriched, tag, b)
    arrivals = Arrivals(b.redis_url, PARTITIONS)
    producer = make(source)
    began, sending_began = time.monotonic(), time.time()
    meter: CpuMeter | None = None
    try:
        for s in steps:
            s.start(0.0)
        meter = CpuMeter({"chain": [s.process.pid for s in steps if s.process is not None]},
                         {"services": service_pids(*service_ports(b))})
        arrivals.start()
        producer.warm_up()
        warm = [f"e{i}" for i in range(producer.warm)]
        if not wait_for(lambda: all(w in arrivals.first for w in warm), steps,
                        args.start_timeout):
            raise BenchError(f"{system}: the warm-up events did not reach the store in "
                             f"{args.start_timeout:g} s")
        row["start_s"] = round(time.monotonic() - began, 1)
        b.say(f"  {system} {what}: started in {row['start_s']} s ({arrivals.mode}); "
              f"sending {producer.total:,} events")
        time.sleep(SETTLE_S)
        sending_began = time.time()
        before = meter.mark()
        producer.start()
        if not wait_for(lambda: not producer.is_alive(), steps, send_s):
            row["problems"].append(f"the producer did not finish sending in {send_s:g} s")
        if not wait_for(lambda: arrived(arrivals) >= producer.sent, steps, drain_s):
            row["problems"].append(f"{producer.sent - len(arrivals.first):,} events not "
                                   f"delivered within {drain_s:g} s of the end")
        spent = meter.mark().minus(before)  # the sending and the drain
        row["cpu"] = {"window_s": round(time.time() - sending_began, 1), **{
            f"{k}_s": v for k, v in spent.items()}}
        time.sleep(0.5)  # late duplicates, if any, reach the poller
    except BenchError as exc:
        row["problems"].append(str(exc))
    finally:
        if meter is not None:
            meter.stop()
        producer.halt.set()
        row["stop_codes"] = {s.name: s.end(graceful=True) for s in reversed(steps)}
        arrivals.stop()
    counts, found = count_events(b.redis_url, producer.sent)
    row["problems"] += [e for e in (producer.error, arrivals.error) if e]
    row["problems"] += found
    row |= {"sent": producer.sent - producer.warm, "warm_up": producer.warm, **counts,
            "poller_wakes": arrivals.wakes, "poller_resyncs": arrivals.resyncs,
            "poller_ahead_reads": arrivals.ahead_reads,
            "poller_gap_reads": arrivals.gap_reads,
            "poller_busy": arrivals.busy}
    return Run(row, producer, arrivals, steps, sending_began)
