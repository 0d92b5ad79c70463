"""What a batch's high-water marks cost as a consumer's store grows, per batch and per run.

    PYTHONPATH=. .venv/bin/python bench/hwm_scale.py [--redis redis://127.0.0.1:6379/9] [--brokers HOST:PORT]
        [--marks 1000,10000,100000,1000000] [--partitions 4,64,256] [--touched 64]
        [--touch active,cold] [--repeat 25] [--run-records 20000] [--run-marks 200000]
        [--run-repeat 2] [--state-sizes 1000,1000000] [--postgres DSN] [--json]

**Per batch** (the store's public methods, as a batch calls them): for each store
size N a consumer is filled with N marks (as N upstream (pid, partition) pairs
leave them); then, for each topic size P, ``--repeat`` batches of every
consumer, interleaved (one batch of each size in turn, so the machine's noise
falls on all sizes alike), each reading what a batch over a P-partition topic
reads -- the commit record before it starts (:meth:`~sqe.ledger.hwm.HwmStore.admit`)
and, per task, the marks of the pairs its records name
(:meth:`~sqe.ledger.hwm.HwmStore.marks`, one round trip per task that meets a pair;
the ``--touched`` pairs map to task ``source partition % P``, as SQE's
partitioner writes them) -- and committing ``--touched`` new marks.  The pairs
are ``active`` (the same ones every batch, as a running consumer's upstream
pairs are) or ``cold`` (others each batch, spread over the whole store: memory
no recent batch touched, the worst case for the server's caches).  Timed from
the client, with the Redis server's own time from ``INFO commandstats`` and the
memory per mark from ``used_memory``.

**Per run** (``--run-records``, 0 skips it): whole ``sqe run --once`` processes
over the same new records (4 Kafka partitions, 16 (pid, partition) pairs,
batches of 1,000, one Redis state), interleaved A B A B: A's consumer holds only
what the run writes, B's holds ``--run-marks`` other marks besides.  Each run's
output is checked: every record in the state, every pair's mark at its last
offset.

The ratios of the largest store to the smallest are the numbers to watch: a
batch should cost what it touches, not what is stored (target: 1.25x or less).
The Redis database given is flushed; without ``--redis`` a Redis of its own is
started, and without ``--brokers`` the local pip broker.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import BenchError, topics
from bench.harness.processes import run_process, sqe_command
from bench.harness.report import finish, parser, say, service_options
from bench.harness.services import kafka_broker, redis_database, with_services
from bench.state_scale import aggregate_batch, lookup_cost, postgres_batch, script_usec
from sqe.ledger.hwm import HwmStore

_FILL_CHUNK = 20_000  # marks per filling commit (one Lua call each)
RUN_PARTITIONS = 4
RUN_PAIRS = [(pid, sp) for pid in (1, 2) for sp in range(8)]  # 16 upstream (pid, partition)


def fill(store: HwmStore, marks: int) -> int:
    """Commit ``marks`` marks (7, 0..marks-1) in chunks; returns the last batch id used."""
    batch = -1
    for start in range(0, marks, _FILL_CHUNK):
        batch += 1
        store.commit(batch, {(7, p): 100 for p in range(start, min(marks, start + _FILL_CHUNK))})
    return batch


def _touched(touch: str, marks: int, touched: int, batch: int) -> list[tuple[int, int]]:
    """The pairs a batch touches: ``active``, the same ones batch after batch (a running
    consumer's upstream pairs); ``cold``, others each batch, spread over the whole store."""
    seed = batch * 7919 if touch == "cold" else 0
    return sorted({(7, (seed + k * 104729) % marks) for k in range(touched)})


@dataclass
class _Consumer:
    """One filled consumer of the per-batch part and the batch id it is at."""

    store: HwmStore
    marks: int
    batch: int
    bytes_per_mark: float


def _filled(url: str, marks: int) -> _Consumer:
    store = HwmStore.from_url(url, f"bench.scale{marks}", 172_800)
    before = int(store.client.info("memory")["used_memory"])
    batch = fill(store, marks)
    memory = int(store.client.info("memory")["used_memory"]) - before
    return _Consumer(store, marks, batch, memory / marks if marks else 0.0)


def _one_batch(c: _Consumer, touch: str, tasks: int, touched: int) -> tuple[float, ...]:
    """One batch of ``c``: (read s, read server us, commit s, commit server us, round trips)."""
    c.batch += 1
    store, client = c.store, c.store.client
    pairs = _touched(touch, c.marks, touched, c.batch)
    by_task: dict[int, list[tuple[int, int]]] = {}
    for pair in pairs:
        by_task.setdefault(pair[1] % tasks, []).append(pair)
    u0 = script_usec(client)
    t0 = time.perf_counter()
    if not store.admit(c.batch):
        raise BenchError(f"batch {c.batch} of {store.consumer} was committed already")
    got: dict[tuple[int, int], int] = {}
    for task_pairs in by_task.values():
        got.update(store.marks(task_pairs))
    t1 = time.perf_counter()
    u1 = script_usec(client)
    store.commit(c.batch, {pair: 200 + c.batch for pair in pairs})
    t2 = time.perf_counter()
    u2 = script_usec(client)
    if set(got) != set(pairs):
        raise BenchError(f"{store.consumer}: read {len(got)} of the {len(pairs)} marks the "
                         "batch touched")
    return t1 - t0, u1 - u0, t2 - t1, u2 - u1, 1 + len(by_task)


def measure(url: str, sizes: list[int], partitions: list[int], touched: int, repeat: int,
            touches: list[str]) -> list[dict[str, float]]:
    """Fill one consumer per size, then, for each way of touching marks and each topic size,
    time ``repeat`` batches of every consumer, interleaved (one batch of each size in turn)."""
    consumers: list[_Consumer] = []
    try:
        for n in sizes:
            consumers.append(_filled(url, n))
        rows = []
        for touch, tasks in [(t, p) for t in touches for p in partitions]:
            times: dict[int, list[tuple[float, ...]]] = {c.marks: [] for c in consumers}
            for i in range(repeat + 1):  # the first round is a warm-up, not counted
                for c in consumers:
                    got = _one_batch(c, touch, tasks, min(touched, c.marks))
                    if i:
                        times[c.marks].append(got)
            for c in consumers:
                cols = list(zip(*times[c.marks], strict=True))
                med = [statistics.median(col) for col in cols]
                rows.append({"marks": c.marks, "partitions": tasks, "touch": touch,
                             "touched": min(touched, c.marks),
                             "read_ms": 1000 * med[0], "read_server_ms": med[1] / 1000,
                             "commit_ms": 1000 * med[2], "commit_server_ms": med[3] / 1000,
                             "round_trips": med[4], "bytes_per_mark": c.bytes_per_mark})
        return rows
    finally:
        for c in consumers:
            c.store.client.delete(*c.store.keys)
            c.store.client.close()


# -- whole runs --------------------------------------------------------------------------------


def _produce(brokers: str, records: int) -> str:
    """A fresh 4-partition topic of ``records`` JSON records with StreamMetadata keys."""
    from sqe.wire.keys import StreamMetadata

    def made() -> Any:
        for i in range(records):
            pid, sp = RUN_PAIRS[i % len(RUN_PAIRS)]
            value = json.dumps({"region": f"r{i % 6}", "event_id": f"e{i}", "amount": i})
            yield (StreamMetadata(pid, sp, i // len(RUN_PAIRS)).to_bytes(), value.encode(),
                   sp % RUN_PARTITIONS)

    topic = topics.create_topic(brokers, "bench-scale", RUN_PARTITIONS)
    topics.fill(brokers, topic, made())
    return topic


def _topology(topic: str, name: str) -> str:
    """A load-like topology: ``topic`` with replay filtering into one Redis hash per run."""
    return json.dumps([
        {"CreateStream": {"streamName": "Events", "objectName": topic, "spoutName": "KAFKA",
                          "spoutType": "OPAQUE", "deserializer": "json", "options": {
                              "jw.sqe.spout.kafka.filterReplays": True,
                              "jw.sqe.spout.kafka.maxRecordsPerBatch": 1000}}},
        {"Query": {"insertInto": {"objectName": "loaded", "stateName": "REDIS",
                                  "stateType": "TRANSACTIONAL",
                                  "fields": ["log", "event_id", "region"], "options": {
                                      "jw.sqe.state.redis.datatype": "HASH",
                                      "jw.sqe.state.redis.keyname.fields": ["log"],
                                      "jw.sqe.state.redis.fieldname.fields": ["event_id"]}},
                   "select": {"expressions": [{"sql": f"'{name}'"}, "event_id", "region"]},
                   "from": {"objectName": "Events"}}},
    ], indent=1)


def _plant(url: str, consumer: str, count: int) -> None:
    """``count`` live marks of other upstream pairs (pid 1000+, 1,000 partitions each) in
    ``consumer``'s store, written straight into its layout: no batch id is committed, so a
    run on a new checkpoint starts as on an empty store."""
    store = HwmStore.from_url(url, consumer, 172_800)
    client = store.client
    try:
        now = int(client.time()[0]) * 1000
        for start in range(0, count, _FILL_CHUNK):
            fields = [f"{1000 + j // 1000}:{j % 1000}" for j in range(start,
                                                                    min(count, start + _FILL_CHUNK))]
            pipe = client.pipeline(transaction=False)
            pipe.hset(store.keys[0], mapping=dict.fromkeys(fields, 5))
            pipe.zadd(store.keys[4], dict.fromkeys(fields, now))
            pipe.execute()
    finally:
        client.close()


def run_once(url: str, brokers: str, topic: str, work: Path, name: str, records: int) -> float:
    """One ``sqe run --once`` process over ``topic``; its seconds, once its output checks."""
    from sqe.cli.local_services import service_conf

    path = work / f"{name}.json"
    path.write_text(_topology(topic, name))
    command = sqe_command(path, "--once", "--conf", "spark.sql.shuffle.partitions=2", name=name,
                          checkpoint=work / "checkpoints" / name, config=False,
                          conf=service_conf(brokers, url))
    seconds = run_process(command, f"sqe run {name}", work / "logs", sample=False).seconds
    store = HwmStore.from_url(url, f"{name}.Events", 172_800)
    try:
        loaded = int(store.client.hlen(name))
        marks = store.marks(RUN_PAIRS)
    finally:
        store.client.close()
    last = {pair: max(i // len(RUN_PAIRS) for i in range(k, records, len(RUN_PAIRS)))
            for k, pair in enumerate(RUN_PAIRS) if k < records}
    if loaded != records or marks != last:
        raise BenchError(f"sqe run {name} loaded {loaded} of {records} records; its marks "
                         f"{'match' if marks == last else 'differ from'} the last offsets")
    return seconds


def measure_runs(url: str, brokers: str, work: Path, records: int, planted: int, repeat: int
                 ) -> dict[str, float]:
    """Interleaved whole runs, A (a handful of marks) and B (``planted`` more)."""
    topic = _produce(brokers, records)
    seconds: dict[str, list[float]] = {"few": [], "many": []}
    for rep in range(repeat):
        for variant in ("few", "many"):
            name = f"scale_{variant}_{rep}_{uuid.uuid4().hex[:6]}"
            if variant == "many":
                _plant(url, f"{name}.Events", planted)
            seconds[variant].append(run_once(url, brokers, topic, work, name, records))
            say(f"  run {rep + 1} {variant}: {seconds[variant][-1]:.1f} s")
    few, many = statistics.median(seconds["few"]), statistics.median(seconds["many"])
    return {"records": records, "planted": planted, "few_s": few, "many_s": many,
            "ratio": many / few}


def measure_states(url: str, dsn: str | None, small: int, large: int, touched: int,
                   repeat: int) -> dict[str, list[dict[str, float]]]:
    """One batch of the Redis aggregate state (``touched`` entries) and of the Postgres state
    (1,000 rows; with ``dsn``) against a state holding ``small`` and ``large`` entries."""

    out: dict[str, list[dict[str, float]]] = {
        f"Redis aggregate, batch merging {touched} entries":
        [aggregate_batch(url, n, touched, repeat) for n in (small, large)]}
    out[f"Redis commands on {touched} random (cold) entries, us per call"] = [
        lookup_cost(url, n, touched, max(repeat, 50)) for n in (small, large)]
    if dsn:
        out["Postgres, batch of 1,000 rows"] = [postgres_batch(dsn, n, 1000, repeat)
                                                for n in (small, large)]
    else:
        say("Postgres state: not measured (give --postgres DSN)")
    return out


def ratios(rows: list[dict[str, Any]], touches: list[str], partitions: list[int]
           ) -> dict[str, dict[str, float]]:
    """Per way of touching and topic size: the largest store's commit, read and batch time over
    the smallest's."""
    out = {}
    for touch, p in [(t, p) for t in touches for p in partitions]:
        of = [r for r in rows if r["partitions"] == p and r["touch"] == touch]
        first, last = of[0], of[-1]
        out[f"{touch} {p}"] = {
            "commit": last["commit_ms"] / first["commit_ms"],
            "read": last["read_ms"] / first["read_ms"],
            "batch": (last["commit_ms"] + last["read_ms"]) / (first["commit_ms"] + first["read_ms"])}
    return out


def table(result: dict[str, Any], touches: list[str], touched: int) -> list[str]:
    """The human-readable report."""
    lines = [f"{'touch':>6} {'marks stored':>13} {'partitions':>10} {'commit ms':>10} "
             f"{'server ms':>10} {'read ms':>8} {'server ms':>10} {'trips':>6} {'bytes/mark':>11}"]
    rows = result["sizes"]
    for r in sorted(rows, key=lambda r: (touches.index(r["touch"]), r["partitions"], r["marks"])):
        lines.append(f"{r['touch']:>6} {r['marks']:>13,} {r['partitions']:>10} "
                     f"{r['commit_ms']:>10.2f} {r['commit_server_ms']:>10.2f} "
                     f"{r['read_ms']:>8.2f} {r['read_server_ms']:>10.2f} "
                     f"{r['round_trips']:>6.0f} {r['bytes_per_mark']:>11.1f}")
    for key, ratio in result["ratios"].items():
        touch, p = key.split(" ")
        of = [r for r in rows if r["partitions"] == int(p) and r["touch"] == touch]
        first, last = of[0], of[-1]
        lines.append(f"{touch} marks, {p} partitions, {touched} touched, {last['marks']:,} stored "
                     f"vs {first['marks']:,}: commit {ratio['commit']:.2f}x, read "
                     f"{ratio['read']:.2f}x, batch {ratio['batch']:.2f}x"
                     + (" (target: 1.25x or less)" if touch == "active" else ""))
    for kind, (first, last) in result["states"].items():
        if "size" in first:  # the memory probe: what a cold entry costs
            lines.append(f"{kind}: " + ", ".join(
                f"{c} {first[c]:.0f} in {first['size']:,} entries, {last[c]:.0f} in "
                f"{last['size']:,}" for c in first if c != "size"))
            continue
        lines.append(f"{kind}: {first['ms']:.2f} ms holding {first['stored']:,}, "
                     f"{last['ms']:.2f} ms holding {last['stored']:,}: "
                     f"{last['ms'] / first['ms']:.2f}x")
    if "run" in result:
        run = result["run"]
        lines.append(f"sqe run --once over {run['records']:,} new records: {run['few_s']:.1f} s "
                     f"with a handful of marks, {run['many_s']:.1f} s with {run['planted']:,} "
                     f"more: {run['ratio']:.2f}x (target: 1.25x or less)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    service_options(ap)
    ap.add_argument("--marks", default="1000,10000,100000,1000000",
                    help="comma-separated store sizes")
    ap.add_argument("--partitions", default="4,64,256",
                    help="comma-separated topic sizes (tasks per batch)")
    ap.add_argument("--touched", type=int, default=64, help="marks one batch touches")
    ap.add_argument("--repeat", type=int, default=25, help="batches timed per size")
    ap.add_argument("--touch", default="active,cold",
                    help="which marks a batch touches: active (the same ones each batch, as "
                         "a running consumer does), cold (others each batch: the worst "
                         "case for memory caches), or both")
    ap.add_argument("--run-records", type=int, default=20_000,
                    help="records of the whole-run comparison (0: skip it)")
    ap.add_argument("--run-marks", type=int, default=200_000,
                    help="other marks the second consumer of the whole runs holds")
    ap.add_argument("--run-repeat", type=int, default=2, help="whole runs per variant")
    ap.add_argument("--state-sizes", default="1000,1000000",
                    help="entries (rows) the aggregate and Postgres states hold, smallest "
                         "and largest")
    ap.add_argument("--postgres", help="a Postgres DSN for the Postgres state's row "
                                       "(default: that row is left out)")
    ap.add_argument("--json", action="store_true", help="print one JSON object last")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.marks.split(",")]
    partitions = [int(s) for s in args.partitions.split(",")]
    touches = args.touch.split(",")
    if not set(touches) <= {"active", "cold"}:
        ap.error("--touch takes active, cold or both")

    def body(stack: ExitStack, work: Path) -> dict[str, Any]:
        url = redis_database(stack, work, args.redis)
        result: dict[str, Any] = {
            "sizes": measure(url, sizes, partitions, args.touched, args.repeat, touches)}
        small, large = (int(s) for s in args.state_sizes.split(","))
        result["states"] = measure_states(url, args.postgres, small, large,
                                          min(args.touched, small), args.repeat)
        if args.run_records > 0:
            result["run"] = measure_runs(url, kafka_broker(stack, work, args.brokers), work,
                                         args.run_records, args.run_marks, args.run_repeat)
        return result

    result = with_services(body)
    if result is None:
        return 1
    result["ratios"] = ratios(result["sizes"], touches, partitions)
    return finish(table(result, touches, args.touched), [], result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
