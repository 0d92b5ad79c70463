"""The whole chain and its parts, each a whole process, against plain programs doing the same.

    PYTHONPATH=. .venv/bin/python bench/chain.py [--events 200000,1000000] [--repeat 2]
        [--empty-batches 30] [--idle-run] [--quix-python PATH]
        [--no-connect | --remote sc://HOST:PORT] [--brokers HOST:PORT]
        [--redis redis://HOST:PORT/DB] [--json]

One run, every contender a subprocess started from scratch, interleaved (A B A B, the order
rotated each repetition), each one's output checked, medians of ``--repeat`` per size:

1. **chain**: ``sqe run --once`` of the shipped ``topologies/enrich.yaml`` and then of
   ``topologies/load.yaml`` (copies pointed at fresh topics, ``--config conf/local.yaml`` and
   ``--conf`` pairs for the services, a unique ``--name`` each time) against
   ``bench/plain_chain.py`` (confluent-kafka, redis-py, json and struct only) doing the same two
   steps.  Check, for both: the Redis hashes of load.yaml hold exactly what the sample events
   give (``events_by_region``: one hash per upper-cased region, every event_id once with its
   amount_cents; ``load_log``: one field per event, every event_id once) and the enriched topic
   holds one record per event.  Redis is flushed before each contender.
2. **enrich vs quixstreams exactly-once**: the chain's ``sqe run --once`` of enrich.yaml (the
   same process as in 1, run on its own) against ``bench/quix_enrich.py``, a quixstreams 3
   ``Application(processing_guarantee="exactly-once")`` doing the same transform, run by
   ``--quix-python`` (default: this interpreter).  Check: a ``read_committed`` consumer counts
   one record per event in its output topic.  Without quixstreams the row is skipped, saying why.
   quixstreams 3 pins confluent-kafka below 2.13 (and pydantic below 2.14): installed next to
   SQE it downgrades them, so give it a virtualenv of its own (``python -m venv /tmp/quix &&
   /tmp/quix/bin/pip install 'quixstreams>=3,<4'``, then ``--quix-python /tmp/quix/bin/python``).
3. **Spark read vs raw consumer**: ``bench/chain_parts.py spark-read`` (the ``sqe-kafka`` source
   in a Spark streaming query, AvailableNow, the events in ``READ_BATCHES`` batches, counting
   rows) against ``raw-read`` (one confluent-kafka consumer over the same range), both over the
   events topic.  Check: both count every record.  A second row sets the read's batches after
   its first (the workers started, the JVM's code made: a long-running stream's read) against
   the raw consumer's work.
4. **Kafka state write vs a bare idempotent producer**: ``chain_parts.py state-write``
   (``state.kafka.sink.write_kafka`` under Spark, as ``bench/kafka_write.py`` runs it) against
   ``idempotent-write`` (one ``enable.idempotence=true`` producer), the same ``--events``
   records of ``kafka_write.make_records``.  Check: each topic holds every record.  A second row
   sets the Kafka state's write run again in the same process against the producer's work.
5. **Spark Connect vs classic**: the chain of 1 with ``sqe run --remote sc://...`` against a
   Spark Connect server this run starts (pyspark's ``start-connect-server.sh``, ``local[2]``, its
   Python workers this interpreter; or the one ``--remote`` names) against the classic chain
   of 1 (the same runs).  Check: as
   in 1.  The Connect hop per batch: the empty micro-batch run of 6 over Connect, its seconds
   per batch minus the classic run's.  ``--no-connect`` leaves the row out.
6. **Fixed costs and memory** of ``sqe run``:
   * *empty micro-batch*: ``sqe run --once`` of load.yaml, with
     ``maxRecordsPerBatch`` = one record per partition, over a topic holding the same key
     ``--empty-batches`` + 1 times per partition: the first batch passes one record per
     partition, every later batch reads replays only and writes no row; seconds per batch =
     median time between the starts of those batches (and their median duration);
   * *idle run* (``--idle-run``): ``sqe run --once`` of load.yaml again on the first chain's
     checkpoint, with nothing new (its whole process);
   * *time to the first batch*: process start of each chain ``sqe run`` to the ``started`` time
     of its first batch in ``<checkpoint>/sqe-progress.jsonl`` (median over all of them);
   * *peak RSS* of the load step's process tree, sampled every 0.2 s from ``/proc``: the Python
     driver (the ``sqe run`` process), the JVM, and Spark's Python workers (the Python processes
     under the JVM: the largest one, and all of them together); the worker's is also given per
     1,000,000 records of the largest batch.

Ratios are SQE / other for throughput (the other's time over SQE's: higher is better); "work
ratio" is the same over each contender's own clock of its work (batches, the consume loop),
without process start-up.  Targets: chain >= 0.5x at 1,000,000 events (>= 0.25x from 200,000),
enrich >= 1.0x quixstreams at 1,000,000, Spark read >= 0.8x, Kafka write >= 0.8x, Connect
>= 0.8x of classic, empty
micro-batch <= 0.3 s, Python worker <= 300 MB per 1,000,000 records in a batch (judged for
batches of at least 1,000,000).  A missed target is reported, never a failure: the command exits
1 only when an output check fails (or a contender fails), with one ``error: ...`` line each.

A local pip broker and a redis-server are started unless ``--brokers`` / ``--redis`` are given
(the Redis database given is flushed, many times).  The machine the numbers come from is
usually shared: read the ratios of one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
import uuid
from typing import Any

from bench.chain_report import CONTENDERS, Run, summarize, table
from bench.harness import BenchError, rotate
from bench.harness.processes import quix_interpreter
from bench.harness.report import (
    finish,
    parse_list,
    parser,
    say,
    service_options,
)
from bench.harness.rss import MB
from bench.harness.services import (
    Services,
    flush,
    redis_client,
    with_services,
)
from bench.harness.topics import PARTITIONS, committed_records, create_topic, fill, topic_size
from bench.harness.topologies import Size, check_chain, check_store, expected_store, topology_copy
from sqe.errors import SqeError

#: The Spark read's batches over the events: the first pays the workers' start, the rest not.
READ_BATCHES = 4

# -- the contenders ----------------------------------------------------------------------------


def sqe_chain(s: Services, size: Size, rep: int, idle_run: bool, remote: bool = False
              ) -> tuple[Run, Run, dict[str, Any]]:
    """enrich then load, each ``sqe run --once`` (over Spark Connect when ``remote``); the
    chain's run, the enrich step's run, and the fixed costs seen (time to first batch, the
    load step's peak RSS, an idle run)."""
    n = size.events
    tag = f"{n}_{rep}_{'connect_' if remote else ''}{uuid.uuid4().hex[:6]}"
    enriched = create_topic(s.brokers, "bench-chain-enriched")
    flush(s.redis_url)
    runs = {}
    for step, source, sink in (("enrich", size.topic, enriched), ("load", enriched, None)):
        runs[step] = s.sqe_run(topology_copy(step, source, sink, s.work), f"chain_{step}_{tag}",
                               s.work / "checkpoints" / f"{step}_{tag}", "--once", remote=remote)
    over = " --remote" if remote else ""
    check_chain(s, size, enriched, f"sqe run{over} enrich.yaml", f"sqe run{over} load.yaml")
    enrich, load = runs["enrich"], runs["load"]
    costs: dict[str, Any] = {
        "first_batch_s": [r.first_batch_s for r in (enrich, load) if r.first_batch_s is not None],
        "load_peaks": load.proc.peaks, "load_batch_records": load.largest_batch,
        "load_batches": len(load.batches)}
    if idle_run:  # the same load again on its checkpoint: nothing new to read
        again = s.sqe_run(topology_copy("load", enriched, None, s.work), f"chain_load_{tag}",
                          s.work / "checkpoints" / f"load_{tag}", "--once")
        if again.batches or check_store(s.redis_url, size.expected):
            raise BenchError(f"sqe run load.yaml with nothing new ran {len(again.batches)} "
                             "batch(es) or changed the store")
        costs["idle_run_s"] = again.proc.seconds
    chain = Run(enrich.proc.seconds + load.proc.seconds, enrich.work + load.work,
                {"enrich_s": enrich.proc.seconds, "load_s": load.proc.seconds,
                 "enrich_batches": len(enrich.batches), "load_batches": len(load.batches)})
    return chain, Run(enrich.proc.seconds, enrich.work), costs


def plain_chain(s: Services, size: Size) -> Run:
    """bench/plain_chain.py enrich then load."""
    enriched = create_topic(s.brokers, "bench-plain-enriched")
    flush(s.redis_url)
    enrich = s.script("plain_chain.py", "enrich", "--brokers", s.brokers, "--source", size.topic,
                      "--sink", enriched)
    load = s.script("plain_chain.py", "load", "--brokers", s.brokers, "--source", enriched,
                    "--redis", s.redis_url, "--consumer", f"plain.{uuid.uuid4().hex[:8]}")
    check_chain(s, size, enriched, "plain_chain.py enrich", "plain_chain.py load")
    return Run(enrich.seconds + load.seconds, enrich.out["seconds"] + load.out["seconds"],
               {"enrich_s": enrich.seconds, "load_s": load.seconds,
                "load_peak_mb": round(load.peaks.tree / MB, 1)})


def quix_enrich(s: Services, size: Size, python: str) -> Run:
    n = size.events
    out = create_topic(s.brokers, "bench-quix-enriched")
    tag = uuid.uuid4().hex[:8]
    proc = s.script("quix_enrich.py", "--brokers", s.brokers, "--source", size.topic,
                    "--sink", out, "--count", str(n), "--group", f"bench-quix-{tag}",
                    "--state-dir", str(s.work / "quix" / tag), python=python)
    seen = committed_records(s.brokers, out)
    if seen != n:
        raise BenchError(f"quix_enrich.py left {seen:,} committed records in {out} for "
                         f"{n:,} events")
    return Run(proc.seconds, proc.out["seconds"], {"offsets": topic_size(s.brokers, out)})


def spark_read(s: Services, size: Size) -> Run:
    proc = s.script("chain_parts.py", "spark-read", "--brokers", s.brokers, "--topic", size.topic,
                    "--checkpoint", str(s.work / "checkpoints" / f"read-{uuid.uuid4().hex[:8]}"),
                    "--batch-records", str(max(1, size.events // READ_BATCHES)))
    if proc.out.get("rows") != size.events:
        raise BenchError(f"the Spark read counted {proc.out.get('rows')} rows of {size.events:,}")
    return Run(proc.seconds, proc.out["seconds"], {
        "batches": proc.out["batches"], "later_rows": proc.out["later_rows"],
        "later_seconds": proc.out["later_seconds"]})


def raw_read(s: Services, size: Size) -> Run:
    proc = s.script("chain_parts.py", "raw-read", "--brokers", s.brokers, "--topic", size.topic)
    if proc.out.get("rows") != size.events:
        raise BenchError(f"the raw consumer read {proc.out.get('rows')} records of "
                         f"{size.events:,}")
    return Run(proc.seconds, proc.out["seconds"])


def writer(s: Services, size: Size, part: str) -> Run:
    proc = s.script("chain_parts.py", part, "--brokers", s.brokers, "--records", str(size.events),
                    "--partitions", str(PARTITIONS))
    written = topic_size(s.brokers, proc.out["topic"])
    if written != size.events:
        raise BenchError(f"{part} left {written:,} records in {proc.out['topic']} for "
                         f"{size.events:,}")
    return Run(proc.seconds, proc.out["seconds"],
               {"again_seconds": proc.out["again_seconds"]} if "again_seconds" in proc.out else {})


# -- the empty micro-batch ---------------------------------------------------------------------


def empty_batches(s: Services, batches: int, remote: bool = False) -> dict[str, Any]:
    """``sqe run --once`` of load.yaml over a topic of replays, one record per partition and
    batch: every batch after the first reads records and writes no row (over Spark Connect
    when ``remote``)."""
    topic = create_topic(s.brokers, "bench-chain-quiet")
    flush(s.redis_url)
    key = struct.Struct(">qiq")
    value = json.dumps({"event_id": "q0", "user": "u0", "region": "EU", "amount": 1,
                        "amount_cents": 100, "big_spender": False}).encode()
    # the same key again and again: replays but the first
    fill(s.brokers, topic, ((key.pack(77, p, 0), value, p) for _ in range(batches + 1)
                            for p in range(PARTITIONS)))
    name = f"chain_quiet_{uuid.uuid4().hex[:6]}"
    run = s.sqe_run(topology_copy("load", topic, None, s.work), name,
                    s.work / "checkpoints" / name, "--once",
                    "--conf", f"jw.sqe.spout.kafka.maxRecordsPerBatch={PARTITIONS}", remote=remote)
    with redis_client(s.redis_url) as client:
        logged = int(client.hlen("load_log"))
    later = [b for b in run.batches if b["batch_id"] >= 1]
    wrote = sum(sum(b["written"].values()) for b in later)
    kept = sum(b["records_read"] - b["replays_dropped"] for b in later)
    if logged != PARTITIONS or wrote or kept:
        raise BenchError(f"the empty-batch run logged {logged} records (expected {PARTITIONS}), "
                         f"and after its first batch kept {kept} records and wrote {wrote} rows "
                         "(expected 0)")
    if len(later) < 2:
        raise BenchError(f"the empty-batch run ran only {len(run.batches)} batches")
    cycles = [b["started"] - a["started"] for a, b in zip(later, later[1:], strict=False)]
    return {"batches": len(later), "records_read": sum(b["records_read"] for b in later),
            "cycle_s": statistics.median(cycles),
            "duration_s": statistics.median(b["duration_s"] for b in later),
            "process_s": run.proc.seconds, "first_batch_s": run.first_batch_s}


# -- the run -----------------------------------------------------------------------------------


def one(who: str, s: Services, size: Size, rep: int, idle_run: bool, quix_python: str | None,
        runs: dict[str, dict[int, dict[str, list[Run]]]], costs: dict[int, list[dict[str, Any]]]
        ) -> None:
    """Run contender ``who`` once on ``size`` and keep what it measured."""
    n = size.events
    if who == "sqe":
        chain, enrich, seen = sqe_chain(s, size, rep, idle_run)
        runs["chain"][n]["sqe"].append(chain)
        runs["connect"][n]["sqe"].append(chain)
        runs["enrich"][n]["sqe"].append(enrich)
        costs[n].append(seen)
    elif who == "sqe-connect":
        chain, _, _ = sqe_chain(s, size, rep, False, remote=True)
        runs["connect"][n]["sqe-connect"].append(chain)
    elif who == "plain":
        runs["chain"][n]["plain"].append(plain_chain(s, size))
    elif who == "quix":
        assert quix_python is not None
        runs["enrich"][n]["quix"].append(quix_enrich(s, size, quix_python))
    elif who in CONTENDERS["read"]:
        runs["read"][n][who].append((spark_read if who == "spark-read" else raw_read)(s, size))
    else:
        runs["write"][n][who].append(writer(s, size, who))


def measure(args: argparse.Namespace, s: Services) -> dict[str, Any]:
    """Everything the benchmark measures, as the JSON object it prints."""
    from sqe.cli.sample_events import produce_events

    begin = time.perf_counter()
    quix_python, quix_info = quix_interpreter(args.quix_python)
    if quix_python is None:
        say(f"enrich vs quixstreams: skipped: {quix_info}")
    else:
        say(f"quixstreams {quix_info} ({quix_python})")
    runs: dict[str, dict[int, dict[str, list[Run]]]] = {
        row: {n: {c: [] for c in contenders} for n in args.events}
        for row, contenders in CONTENDERS.items()}
    costs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.events}
    problems: list[str] = []
    for n in args.events:
        t = time.perf_counter()
        topic = create_topic(s.brokers, "bench-chain-events")
        produce_events(s.brokers, topic, n, partitions=PARTITIONS)
        size = Size(n, topic, expected_store(n))
        say(f"{n:,} sample events in {topic} ({PARTITIONS} partitions) in "
            f"{time.perf_counter() - t:.0f} s")
        for rep in range(args.repeat):
            for group in (("sqe", "plain", "quix", "sqe-connect"), CONTENDERS["read"],
                          CONTENDERS["write"]):
                for who in rotate(group, rep):
                    if (who == "quix" and quix_python is None) or \
                            (who == "sqe-connect" and s.connect is None):
                        continue
                    try:
                        one(who, s, size, rep, args.idle_run and (n, rep) == (args.events[0], 0),
                            quix_python, runs, costs)
                    except (BenchError, SqeError) as exc:
                        what = f"{who} at {n:,} events, repetition {rep + 1}"
                        problems.append(f"{what}: {exc}")
                        say(f"error: {what}: {exc}")
            say(f"{n:,} events, repetition {rep + 1} of {args.repeat} done at "
                f"{time.perf_counter() - begin:.0f} s: " + ", ".join(
                    f"{row} {c} {r[-1].seconds:.1f} s" for row in CONTENDERS
                    for c, r in runs[row][n].items() if r and not (row == "enrich" and c == "sqe")))
        del size
    empty: dict[str, dict[str, Any]] = {}
    for how in ("classic", "connect") if s.connect else ("classic",):
        try:
            empty[how] = empty_batches(s, args.empty_batches, remote=how == "connect")
        except (BenchError, SqeError) as exc:
            problems.append(f"empty micro-batches ({how}): {exc}")
            say(f"error: empty micro-batches ({how}): {exc}")
            continue
        say(f"empty micro-batches ({how}): {empty[how]['batches']}, "
            f"{empty[how]['cycle_s']:.2f} s apart")
    result = summarize(args, runs, costs, empty, problems)
    result["quix"] = ({"python": quix_python, "version": quix_info, "skipped": None}
                      if quix_python else {"python": None, "version": None, "skipped": quix_info})
    result["seconds"] = time.perf_counter() - begin
    return result


def parse_sizes(text: str) -> list[int]:
    return parse_list(text, int, "--events", "counts", "counts of at least 1")


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--events", type=parse_sizes, default=[200_000, 1_000_000],
                    help="sizes, comma-separated (default 200000,1000000)")
    ap.add_argument("--repeat", type=int, default=2, help="repetitions of every contender")
    ap.add_argument("--empty-batches", type=int, default=30,
                    help="micro-batches without rows the empty-batch run makes")
    ap.add_argument("--idle-run", action="store_true",
                    help="also time sqe run --once of the first chain's load with nothing new")
    ap.add_argument("--quix-python", help="the Python that runs quix_enrich.py (default: this "
                                          "one); the row is skipped when it has no quixstreams")
    ap.add_argument("--no-connect", dest="connect", action="store_false",
                    help="leave out the chain over Spark Connect (and its server)")
    ap.add_argument("--remote", metavar="sc://HOST:PORT",
                    help="the Spark Connect server of the Connect row (its Python workers must "
                         "import this tree's sqe); default: start one")
    service_options(ap)
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.empty_batches < 2:
        ap.error("--repeat must be at least 1 and --empty-batches at least 2")
    if args.remote and not args.connect:
        ap.error("--remote names the server of the Connect row, which --no-connect leaves out")

    result = with_services(lambda stack, work: measure(args, Services.start(
        stack, work, args.brokers, args.redis, args.connect, args.remote)), "sqe-bench-chain-")
    if result is None:
        return 1
    return finish(table(result), result["problems"], result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())

