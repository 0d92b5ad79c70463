"""Nemesis: the chain under steady input while overlapping faults, drawn from a seed, hit it.

    PYTHONPATH=. .venv/bin/python bench/nemesis.py --seed 7 [--minutes 10] [--rate 200]
        [--every 20] [--kinds kill,pause,...] [--schedule FILE] [--seeds 1,2,3] [--cluster]
        [--way topology|hop|sink|pipeline] [--connect]
        [--drain-timeout 600] [--out DIR] [--json]

For each seed, :class:`bench.nemesis_world.World` starts the broker, a Redis pair with its
Sentinel and a Postgres cluster, each behind a fault proxy on loopback, and the chain
(enrich -> load into Redis and Postgres) as two long-running ``sqe run`` processes (``--way
hop`` or ``sink``: the same hops of ``examples/pyspark_chain.py``; ``pipeline``: the flows of
``examples/pipeline``, a Declarative Pipeline each, run again each time one ends;
:mod:`bench.nemesis_runs`); a thread
writes the sample events ``e0, e1, ...`` at ``--rate`` per second for ``--minutes``, and the
faults of :func:`bench.nemesis_schedule.draw` (``--seed``, about one per ``--every`` seconds, of
``--kinds``) are inflicted at their times, each in its own thread, so they overlap.  A run
that ends unbidden is recorded (its exit code and last sentence) and started again; a second
run a takeover started is kept when the first ends.  Then the input ends, the chain drains,
both runs get SIGTERM, and a checker compares each event id's count in the input topic with
its count in load's Redis log (``load_log``) and in its Postgres table: lost, duplicated and
unknown events per store, and (Jepsen's "unseen") events the broker acknowledged to the input's
producer that a store never got; and it reads enrich's Kafka output for records of a (pid,
source partition) below a higher offset that no replay explains (the next hop would drop
them), listing each with its key.  Printed: the seed and the schedule (also in ``schedule.json``;
``--schedule`` replays it exactly), each fault with the seconds the chain took to make
progress again after it (load's next batch), every run's exit and memory trend (its RSS every
30 s, kept in ``memory.jsonl``; :mod:`bench.harness.trend`), the verdict.  Exit 1 when an
event is lost, duplicated, unknown or unseen, a record is out of order, or the chain does not
drain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from bench.harness.processes import last_error
from bench.harness.report import parser
from bench.harness.trend import MemoryLog
from bench.nemesis_check import counts, failed, out_of_order, verdict
from bench.nemesis_runs import HOP_WAYS, clock_missing
from bench.nemesis_schedule import DEFAULT_KINDS, KINDS, Fault, draw, load, save
from bench.nemesis_world import SteadyProducer, World
from sqe.errors import SqeError

#: Seconds between two samples of each run's memory (the peak RSS of its process tree since
#: the last sample): a long run's memory trend, fitted within each start of the run.
MEMORY_EVERY = 30.0


def supervise(world: World, begin: float, exits: list[dict[str, Any]],
              progress: dict[str, list[float]]) -> None:
    """One look at the runs: new batches noted, unbidden exits recorded and restarted."""
    now = time.monotonic()
    for name, run in world.runs.items():
        for rival, log in list(run.rivals):
            if rival.poll() is not None:
                exits.append({"t": round(now - begin, 1), "run": f"{name}'s second run",
                              "code": rival.returncode, "said": last_error(log)})
                run.rivals.remove((rival, log))
        if run.new_batches():
            progress[name].append(now)
            run.failures = 0
        lock = world.locks[name]
        if not lock.acquire(blocking=False):
            continue  # a fault is at it
        try:
            if run.killed:
                continue
            if run.process is None:  # ended unbidden: started again after a pause
                if now >= run.restart_at:
                    run.start(now)
                continue
            if run.process.poll() is None:
                continue
            if run.finishes and run.process.returncode == 0:  # read what was there: again
                run.end()
                run.start(now)
                continue
            said = last_error(run.log)
            exits.append({"t": round(now - begin, 1), "run": name,
                          "code": run.process.returncode, "said": said})
            live = [r for r in run.rivals if r[0].poll() is None]
            healed = world.heal(name, said) if not live else None
            if healed is not None:  # its HWM store lost commits: rebuilt from the topic
                exits[-1]["healed"] = healed
                run.end()
                run.start(time.monotonic())
            elif live:  # the second run a takeover started goes on as this run
                run.adopt(*live[0])
            else:  # 2 s, then twice as long after each exit without a batch, up to 30 s
                run.end()
                run.failures += 1
                run.restart_at = now + min(30.0, 2.0 * 2 ** (run.failures - 1))
        finally:
            lock.release()


def backlog(world: World, consumer: Any) -> dict[str, int]:
    """Records each run has still to read (topic end offsets minus its last batch's)."""
    left = {}
    for name, run in world.runs.items():
        total = 0
        for p in range(4):
            low, end = consumer.get_watermark_offsets(TopicPartition(run.topic, p), timeout=10)
            total += max(0, end - run.offsets.get(str(p), low))
        left[name] = total
    return left


def one_seed(args: argparse.Namespace, seed: int, out: Path, say: Any) -> dict[str, Any]:
    from sqe.clients.kafka import consumer_conf, new_consumer

    seconds = args.minutes * 60
    kinds = tuple(k for k in args.kinds if (k != "lose-worker" or args.cluster)
                  and (k != "server-kill" or args.connect))
    faults = load(args.schedule) if args.schedule else draw(seed, seconds, args.every, kinds)
    out.mkdir(parents=True, exist_ok=True)
    save(faults, out / "schedule.json")
    say(f"nemesis seed {seed}: {len(faults)} faults over {args.minutes:g} min at "
        f"{args.rate:g} events/s; schedule in {out / 'schedule.json'}")
    for fault in faults:
        say("  " + fault.describe())
    world = World(out, say, cluster=args.cluster, connect=args.connect)
    journals: list[dict[str, Any]] = []
    exits: list[dict[str, Any]] = []
    progress: dict[str, list[float]] = {"enrich": [], "load": []}
    try:
        world.start_chain(f"{seed}_{int(time.time())}", args.way,
                          clocks=any(f.kind == "clock" for f in faults))
        producer = SteadyProducer(world.direct_brokers, world.events, args.rate, seconds)
        consumer = new_consumer(consumer_conf(world.direct_brokers, "nemesis-lag", quiet=True),
                                "nemesis lag")
        begin = time.monotonic()
        producer.start()
        threads = []
        pending = list(faults)
        drained, left = False, {}
        memory = MemoryLog(world.runs, out / "memory.jsonl", MEMORY_EVERY)
        while True:
            t = time.monotonic() - begin
            memory.sample(t, begin)
            while pending and pending[0].at <= t:
                fault = pending.pop(0)
                journal: dict[str, Any] = {"fault": fault}
                journals.append(journal)
                thread = threading.Thread(target=_inflict, args=(world, fault, journal, say),
                                          daemon=True)
                thread.start()
                threads.append(thread)
            supervise(world, begin, exits, progress)
            input_done = not producer.is_alive() and not pending and \
                not any(th.is_alive() for th in threads)
            if input_done:
                left = backlog(world, consumer)
                drained = not any(left.values())
                if drained or t > seconds + args.drain_timeout:
                    break
            time.sleep(0.5)
        consumer.close()
        stop_codes = {name: world.runs[name].end(graceful=True) for name in ("enrich", "load")}
        last = {name: {"starts": run.starts, "said": last_error(run.log)}
                for name, run in world.runs.items()}  # where a chain that did not drain was
        found = counts(world)
        disorder = out_of_order(world)
    finally:
        world.stop()
    faults_done = []
    for journal in journals:
        fault: Fault = journal["fault"]
        ended = journal.get("ended")
        after = [p for p in progress["load"] if ended is not None and p >= ended]
        faults_done.append({**{k: v for k, v in journal.items()
                               if k not in ("fault", "began", "ended")},
                            "fault": fault.describe().strip(),
                            "healed_s": round(after[0] - ended, 1) if after else None,
                            "error": journal.get("error")})
    result = {"seed": seed, "way": args.way + (" over Connect" if args.connect else ""),
              "minutes": args.minutes, "rate": args.rate,
              "events": sum(found["input"].values()), "faults": faults_done, "exits": exits,
              "stop_codes": stop_codes, "last": last, "drained": drained, "backlog_end": left,
              "producer_error": producer.error,
              "stores": verdict(found, producer.acked), "out_of_order": disorder,
              "acked": len(producer.acked),
              "broker_lost": sum(1 for i in producer.acked if not found["input"][i]),
              "memory": memory.trends(),
              "out": str(out)}
    (out / "nemesis.json").write_text(json.dumps(result, indent=1))
    return result


def _inflict(world: World, fault: Fault, journal: dict[str, Any], say: Any) -> None:
    try:
        world.inflict(fault, journal)
    except Exception as exc:  # the fault could not be done or undone: said and recorded
        journal["error"] = f"{type(exc).__name__}: {exc}"
        say(f"fault {fault.describe().strip()} failed: {journal['error']}")


def report(r: dict[str, Any]) -> list[str]:
    heals = [f["healed_s"] for f in r["faults"] if f["healed_s"] is not None]
    lines = [f"seed {r['seed']} ({r.get('way', 'topology')}): {r['events']:,} events, "
             f"{len(r['faults'])} faults, slowest "
             f"heal {max(heals, default=0):.1f} s; " + "; ".join(
                 f"{store}: lost {v['lost']:,}, duplicated {v['duplicated']:,}, unknown "
                 f"{v['unknown']:,}, unseen {v['unseen']:,}" for store, v in r["stores"].items())
             + f"; out of order in enrich's output: {len(r['out_of_order'])}"]
    if r["broker_lost"]:  # unseen everywhere: the input topic lost them, not the chain
        lines.append(f"  the broker acknowledged {r['broker_lost']:,} input events that its "
                     "topic does not hold: unseen in every store, lost before the chain")
    lines += [f"  out of order: {anomaly}" for anomaly in r["out_of_order"][:20]]
    for f in r["faults"]:
        healed = "no progress after it" if f["healed_s"] is None else \
            f"load's next batch {f['healed_s']:.1f} s after"
        noted = [f"{k.replace('_', ' ')}: {v}" for k, v in f.items()
                 if k not in ("fault", "healed_s", "error")]
        lines.append(f"  {f['fault']}: {healed}" + "".join(f"; {n}" for n in noted)
                     + (f" (failed: {f['error']})" if f["error"] else ""))
    for e in r["exits"]:
        lines.append(f"  exit at {e['t']:.0f} s: {e['run']} exited {e['code']}: {e['said']}"
                     + (f"; healed: {e['healed']}" if e.get("healed") else ""))
    for name, m in r.get("memory", {}).items():
        slopes = ", ".join(f"{k} {v:+.2f}" for k, v in m["slope_mb_per_min"].items()
                           if v is not None)
        lines.append(f"  {name}: RSS {m['rss_start_mb']} -> {m['rss_end_mb']} MB (peak "
                     f"{m['rss_peak_mb']}; PSS at the end {m.get('pss_end_mb')}); slope over "
                     f"the second half (MB/min): {slopes or '-'}")
    if not r["drained"]:
        lines.append(f"  the chain did not drain: {r['backlog_end']} records left; " + "; ".join(
            f"{name}, started {v['starts']} times, said last: {v['said']}"
            for name, v in r["last"].items()))
    if r["producer_error"]:  # events it could not send are not in the input: not expected
        lines.append(f"  the input's producer: {r['producer_error']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    ap.add_argument("--seeds", help="several seeds, one run each: 1,2,3 (instead of --seed)")
    ap.add_argument("--minutes", type=float, default=10.0, help="minutes of input (default 10)")
    ap.add_argument("--rate", type=float, default=200.0, help="events per second (default 200)")
    ap.add_argument("--every", type=float, default=20.0,
                    help="seconds between faults, on average (default 20)")
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                    help=f"the fault kinds to draw from (default {','.join(DEFAULT_KINDS)}; "
                         f"known: {','.join(KINDS)})")
    ap.add_argument("--schedule", type=Path, help="replay this schedule.json instead of drawing")
    ap.add_argument("--way", choices=("topology", *HOP_WAYS), default="topology",
                    help="how the chain's hops run: topology files by sqe run (default), "
                         "examples/pyspark_chain.py's hops, each batch written by "
                         "hop.exactly_once (hop) or by the sqe-hop sink (sink), or "
                         "examples/pipeline's flows, a Declarative Pipeline each (pipeline)")
    ap.add_argument("--connect", action="store_true",
                    help="with --way hop or sink: the hops over a Spark Connect server, and "
                         "draw server-kill faults")
    ap.add_argument("--cluster", action="store_true",
                    help="run load's executors on a standalone cluster of two workers, and "
                         "draw lose-worker faults")
    ap.add_argument("--drain-timeout", type=float, default=600.0,
                    help="seconds the chain may take to drain once the input ends (default 600)")
    ap.add_argument("--out", type=Path, help="for logs and results (default: a new /tmp dir)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON last")
    args = ap.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        ap.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    if "takeover" in args.kinds and (os.geteuid() != 0 or not shutil.which("unshare")):
        args.kinds.remove("takeover")
        print("nemesis: no takeover faults: a second run from another host name needs root "
              "and unshare", file=sys.stderr)
    if args.way != "topology" and args.cluster:
        ap.error("--cluster runs topology files: the example's hops make their own local session")
    if args.connect and args.way in ("topology", "pipeline"):
        ap.error("--connect runs the hops of --way hop or sink over a Spark Connect server")
    if args.way == "pipeline" and "forget" in args.kinds:
        args.kinds.remove("forget")
        print("nemesis: no forget faults with --way pipeline: Declarative Pipelines keeps the "
              "flows' checkpoints, which no rebuild of the marks reads", file=sys.stderr)
    if args.connect and "clock" in args.kinds:  # the clients' clocks run no batch
        args.kinds.remove("clock")
        print("nemesis: no clock faults with --connect: the hops' batches run on the server",
              file=sys.stderr)
    missing = clock_missing() if "clock" in args.kinds else None
    if missing:
        args.kinds.remove("clock")
        print(f"nemesis: no clock faults: {missing}", file=sys.stderr)
    if args.minutes <= 0 or args.rate <= 0 or args.every <= 0:
        ap.error("--minutes, --rate and --every must be over 0")
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    except ValueError:
        ap.error(f"--seeds: expected numbers separated by commas, got {args.seeds!r}")
    out = (args.out or Path(tempfile.mkdtemp(prefix="sqe-nemesis-"))).resolve()
    used = [f"seed-{s}" for s in seeds if (out / f"seed-{s}").exists()]
    if used:
        ap.error(f"--out: {out} holds an earlier run of {', '.join(used)}, whose topics, "
                 "tables and checkpoints a new run would mix with its own; give a new directory")
    results = []
    for seed in seeds:
        try:
            results.append(r := one_seed(args, seed, out / f"seed-{seed}",
                                         lambda text: print(text, flush=True)))
        except (SqeError, RuntimeError, OSError) as exc:
            print(f"error: seed {seed}: {exc}", file=sys.stderr)
            return 1
        for line in report(r):
            print(line, flush=True)
    if args.json:
        print(json.dumps(results))
    return 1 if any(failed(r) for r in results) else 0


if __name__ == "__main__":
    with suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
