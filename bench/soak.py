"""Soak: the chain under steady input for a long time, its topologies killed now and then.

    PYTHONPATH=. .venv/bin/python bench/soak.py [--minutes 60] [--rate 500] [--kill-every 10]
        [--sample-every 15] [--restart-after 5] [--drain-timeout 600] [--out DIR]
        [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

Copies of ``topologies/enrich.yaml`` and ``load.yaml`` on fresh topics run as long-running
``sqe run`` processes while a thread writes sample events ``e0, e1, ...`` at ``--rate`` per second
for ``--minutes``; every ``--kill-every`` minutes enrich or load, in turn, gets SIGKILL (process
group and all under it) and is restarted on its checkpoint.  Sampled every ``--sample-every`` s:
each run's peak RSS (driver, JVM, Python workers, tree), batches (its progress file) and backlog
(topic end offsets minus its last batch's); Redis ``used_memory``, load's HWM marks and store rows
(``HLEN load_log``).  Then the input ends, the chain drains, both runs get SIGTERM, and every event
id must be in ``load_log`` once (and the region hashes as bench/chain.py checks them).  RSS growth:
slope (MB/min) over the last half of the input, fitted within each process's life minus its first
minute.  Into ``--out``: ``soak.json``, ``soak.png`` (and logs, checkpoints, services' data).  A pip
broker and a redis-server are started unless ``--brokers`` / ``--redis`` are given (that database
is flushed).  Exit 1 when an event is lost or duplicated, the store differs, the chain does not
drain or a run dies unbidden.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from bench.harness import BenchError
from bench.harness.processes import SqeProcess
from bench.harness.report import finish, parser, say, service_options
from bench.harness.rss import MB
from bench.harness.services import kafka_and_redis, redis_client, with_services
from bench.harness.topics import PARTITIONS, EventWriter, create_topic
from bench.harness.topologies import count_events, topology_copy
from bench.harness.trend import WARMUP_S, memory_trend, slope

TOPOLOGIES = ("enrich", "load")


def sample(t: float, phase: str, runs: dict[str, SqeProcess], consumer: Any, redis: Any,
           producer: EventWriter) -> dict[str, Any]:
    """One sample of every run and of Redis (each run's progress read before its topic's end
    offsets: a batch in the progress file has written its output)."""
    row: dict[str, Any] = {"t": round(t, 1), "phase": phase, "produced": producer.sent}
    for name, run in runs.items():
        batches, backlog = run.new_batches(), 0
        for p in range(PARTITIONS):
            low, end = consumer.get_watermark_offsets(TopicPartition(run.topic, p), timeout=10)
            backlog += max(0, end - run.offsets.get(str(p), low))
        durations = [b["duration_s"] for b in batches]
        row[name] = {"start": run.starts, "since": round(run.since, 1), "rss_mb": run.peaks().mb(),
                     "batches": len(batches), "records": sum(b["records_read"] for b in batches),
                     "replays_dropped": sum(b["replays_dropped"] for b in batches),
                     "batch_s_max": max(durations, default=None), "backlog": backlog,
                     "batch_s_mean": statistics.fmean(durations) if durations else None}
    row["redis"] = {"used_memory_mb": round(redis.info("memory")["used_memory"] / MB, 2),
                    "hwm_marks": redis.hlen(runs["load"].hwm_key),
                    "store_rows": redis.hlen("load_log")}
    return row


def summarize(samples: list[dict[str, Any]], soak_s: float) -> dict[str, Any]:
    soak, last = [s for s in samples if s["phase"] == "soak"], samples[-1]
    out: dict[str, Any] = {}
    for name in TOPOLOGIES:
        durations = [d for s in samples if (d := s[name]["batch_s_max"]) is not None]
        out[name] = {
            **memory_trend([s[name] | {"t": s["t"]} for s in soak], soak_s),
            "batches": sum(s[name]["batches"] for s in samples),
            "batch_s_median": statistics.median(durations) if durations else None,
            "batch_s_max": max(durations, default=None),
            "backlog_max": max(s[name]["backlog"] for s in samples),
            "backlog_end": last[name]["backlog"]}
    memory = [(0, s["t"] / 60, s["redis"]["used_memory_mb"]) for s in soak] or [(0, 0, None)]
    out["redis"] = {"used_memory_start_mb": memory[0][2], "used_memory_end_mb": memory[-1][2],
                    "used_memory_slope_mb_per_min": slope([m for m in memory
                                                           if m[1] >= soak_s / 120]),
                    "hwm_marks_end": last["redis"]["hwm_marks"],
                    "store_rows_end": last["redis"]["store_rows"]}
    return out


def plot(result: dict[str, Any], path: Path) -> str | None:
    """The four panels as a PNG; None, or why there is no plot."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install 'sqe-spark[plot]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples, colors = result["samples"], {"enrich": "tab:blue", "load": "tab:orange"}
    t = [s["t"] / 60 for s in samples]
    fig, ax = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    for name, color in colors.items():
        for part, style in (("tree", "-"), ("jvm", "--"), ("workers", ":")):
            ax[0].plot(t, [s[name]["rss_mb"][part] or None for s in samples], color=color,
                       ls=style, label=f"{name}: {part}")
        ax[1].plot(t, [s[name]["batch_s_max"] for s in samples], ".", color=color,
                   label=f"{name}: longest batch since the last sample")
        ax[2].plot(t, [s[name]["backlog"] for s in samples], color=color, label=name)
    ax[3].plot(t, [s["redis"]["used_memory_mb"] for s in samples], color="tab:red",
               label="Redis used_memory")
    marks = ax[3].twinx()
    marks.plot(t, [s["redis"]["hwm_marks"] for s in samples], color="tab:green")
    marks.set_ylabel("HWM marks of load (green)")
    for a, label in zip(ax, ("RSS (MB, peak per sample)", "batch duration (s)",
                             "backlog (records)", "Redis used_memory (MB)"), strict=True):
        a.axvline(result["config"]["minutes"], color="grey", ls="--", lw=1)
        for kill in result["kills"]:
            a.axvline(kill["t"] / 60, color=colors[kill["topology"]], alpha=0.5, lw=1)
        a.set_ylabel(label)
        a.legend(loc="upper left", fontsize=7)
        a.grid(alpha=0.3)
    ax[-1].set_xlabel("minutes (solid vertical lines: kills, coloured by run; dashed: input ends)")
    ax[0].set_title(f"soak: {result['config']['rate']:g} events/s for "
                    f"{result['config']['minutes']:g} min, {len(result['kills'])} kills")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def soak(args: argparse.Namespace, brokers: str, redis_url: str, out: Path, stack: ExitStack
         ) -> dict[str, Any]:
    from sqe.cli.local_services import service_conf
    from sqe.clients.kafka import consumer_conf, new_consumer

    events, enriched = (create_topic(brokers, f"soak-{t}") for t in ("events", "enriched"))
    tag, conf = f"{int(time.time())}", service_conf(brokers, redis_url)
    runs = {step: SqeProcess(f"soak_{step}_{tag}", topology_copy(step, source, sink, out),
                             source, out, conf)
            for step, source, sink in (("enrich", events, enriched), ("load", enriched, None))}
    stack.callback(lambda: [run.end() for run in runs.values()])
    consumer = new_consumer(consumer_conf(brokers, "soak-lag", quiet=True), "soak lag")
    stack.callback(consumer.close)
    client = stack.enter_context(redis_client(redis_url))
    soak_s, kill_s = args.minutes * 60, args.kill_every * 60
    producer = EventWriter(brokers, events, args.rate, soak_s)
    stack.callback(producer.halt.set)
    begin = time.monotonic()
    now: Callable[[], float] = lambda: time.monotonic() - begin  # noqa: E731
    for run in runs.values():
        run.start(now())
    producer.start()
    say(f"soak: {args.rate:g} events/s for {args.minutes:g} min into {events}; output in {out}")
    plan = [k * kill_s for k in range(1, math.ceil(soak_s / kill_s))] if kill_s else []
    kills, samples, problems = list[dict[str, Any]](), list[dict[str, Any]](), list[str]()
    next_sample, drained = 0.0, False
    while True:
        phase = "soak" if now() < soak_s or producer.is_alive() else "drain"
        if phase == "drain" and (drained or now() > soak_s + args.drain_timeout):
            break
        if plan and now() >= plan[0]:
            del plan[0]
            run, at = runs[which := TOPOLOGIES[len(kills) % 2]], now()
            run.end()
            time.sleep(args.restart_after)
            run.start(now())
            kills.append({"t": round(at, 1), "topology": which, "restarted_t": round(now(), 1)})
            say(f"{at / 60:5.1f} min: killed {run.name}, restarted")
        for run in runs.values():
            if why := run.died():
                problems.append(f"at {now() / 60:.1f} min: {why}")
                say(f"error: {problems[-1]}")
                if now() - run.since < WARMUP_S:
                    raise BenchError(why)
                run.start(now())
        if now() >= next_sample:
            samples.append(row := sample(now(), phase, runs, consumer, client, producer))
            next_sample += args.sample_every
            drained = phase == "drain" and all(row[n]["backlog"] == 0 for n in TOPOLOGIES)
            say(f"{row['t'] / 60:5.1f} min {phase}: produced {row['produced']:,}, " + ", ".join(
                f"{n} {row[n]['rss_mb']['tree']:,.0f} MB backlog {row[n]['backlog']:,}"
                for n in TOPOLOGIES) + f", store {row['redis']['store_rows']:,}")
        time.sleep(0.5)
    producer.join()
    problems += [] if drained else [f"no drain within {args.drain_timeout:g} s of the input's end"]
    codes = {n: runs[n].end(graceful=True) for n in reversed(TOPOLOGIES)}
    counts, found = count_events(redis_url, producer.sent)
    problems += [producer.error] if producer.error else []
    problems += found
    result = {"config": {k: getattr(args, k) for k in ("minutes", "rate", "kill_every",
                                                       "sample_every", "restart_after")},
              "events": producer.sent, **counts, "wall_s": round(now(), 1), "kills": kills,
              "stop_codes": codes, "summary": summarize(samples, soak_s), "problems": problems,
              "out": str(out), "samples": samples}
    no_plot = plot(result, out / "soak.png")
    result["plot"] = f"none: {no_plot}" if no_plot else str(out / "soak.png")
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    return result


def report(r: dict[str, Any]) -> list[str]:
    def num(v: float | None, fmt: str = ",.0f") -> str:
        return "-" if v is None else format(v, fmt)

    lines = [f"events produced {r['events']:,}, lost {r['lost']:,}, duplicated "
             f"{r['duplicated']:,}, unknown {r['unknown']:,}; {len(r['kills'])} kills; "
             f"wall {r['wall_s'] / 60:.1f} min"]
    for name in TOPOLOGIES:
        s = r["summary"][name]
        slopes = ", ".join(f"{k} {num(v, '+.2f')}" for k, v in s["slope_mb_per_min"].items())
        lines.append(f"{name}: RSS {num(s['rss_start_mb'])} -> {num(s['rss_end_mb'])} MB (peak "
                     f"{num(s['rss_peak_mb'])}); slope over the last half (MB/min): {slopes}; "
                     f"{s['batches']:,} batches, median {num(s['batch_s_median'], '.2f')} s, "
                     f"longest {num(s['batch_s_max'], '.1f')} s; backlog max "
                     f"{s['backlog_max']:,}, at the end {s['backlog_end']:,}")
    red = r["summary"]["redis"]
    lines.append(f"redis: used_memory {num(red['used_memory_start_mb'], '.1f')} -> "
                 f"{num(red['used_memory_end_mb'], '.1f')} MB (slope over the last half "
                 f"{num(red['used_memory_slope_mb_per_min'], '+.2f')} MB/min, with a store that "
                 f"grows), {red['hwm_marks_end']} HWM marks, {red['store_rows_end']:,} store rows")
    return lines + [f"samples: {r['out']}/soak.json; plot: {r['plot']}"]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    for flag, default, text in (
            ("--minutes", 60.0, "minutes of input"), ("--rate", 500.0, "events per second"),
            ("--kill-every", 10.0, "minutes between kills, enrich and load in turn (0: none)"),
            ("--restart-after", 5.0, "seconds from a kill to the restart"),
            ("--sample-every", 15.0, "seconds between samples"),
            ("--drain-timeout", 600.0, "seconds the chain may take to drain once the input ends")):
        ap.add_argument(flag, type=float, default=default, help=f"{text} (default {default:g})")
    ap.add_argument("--out", type=Path, help="for soak.json, soak.png, logs (default: a new /tmp dir)")
    service_options(ap)
    ap.add_argument("--json", action="store_true", help="also print the summary as JSON last")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.sample_every < 1 or args.kill_every < 0:
        ap.error("--minutes and --rate must be over 0, --sample-every 1 or more, --kill-every >= 0")
    out = (args.out or Path(tempfile.mkdtemp(prefix="sqe-soak-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def body(stack: ExitStack, out: Path) -> dict[str, Any]:
        brokers, redis_url = kafka_and_redis(stack, out / "services", args.brokers, args.redis)
        return soak(args, brokers, redis_url, out, stack)

    result = with_services(body, out=out)
    if result is None:
        return 1
    summary = {k: v for k, v in result.items() if k != "samples"}
    return finish(report(result), result["problems"], summary if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
