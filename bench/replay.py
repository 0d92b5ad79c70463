"""Replay filtering, four ways on one topic, and the cost of the state each way keeps.

    PYTHONPATH=. .venv/bin/python bench/replay.py [--records 200000] [--partitions 4]
        [--replays 0.05] [--batch-records 100000] [--repeat 3] [--chain-events 5000]
        [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

The default size is 200,000 records, not the 2,000,000 the benchmark was
specified with: on the shared 2-core machine it was written on, four Spark
consumers x 3 repetitions of 2,000,000 records take several minutes of
micro-batches alone, over the 3 minutes a default run may take
(``--records 2000000 --batch-records 1000000`` runs the full size).

The data: ``--records`` records of about 100 bytes over ``--partitions``
Kafka partitions, keyed with the 20-byte StreamMetadata key of 2 pids x 8
source partitions (16 (pid, partition) groups; a group's records all sit in
Kafka partition ``source partition % partitions``, in source-offset order, as
``SourcePartitionPartitioner`` writes them).  ``--replays`` of the records are
*replays*: an upstream retry after source offset ``p`` re-sends the last 1..39
offsets up to ``p`` (keys that repeat earlier ones exactly) and then goes on
with ``p + 1``.

One run, the same topic, read by five consumers (Spark's AvailableNow trigger,
micro-batches of ``--batch-records``, every consumer's ``foreachBatch`` runs
the same aggregation: rows and largest source offset per (pid, partition)):

* (a) ``plain``: the ``sqe-kafka`` source, no filtering;
* (b) ``pushdown``: the same source with ``filterReplays``: the HWMs are read
  from Redis when Spark plans each batch, replays are dropped in ``read()``,
  and the batch commits its new HWMs to Redis (``sqe.ledger.hwm.HwmStore.commit``,
  as ``sqe run`` does), so replays that straddle a batch boundary are dropped
  by the marks stored in Redis;
* (c) ``dataframe``: (a) plus :func:`sqe.source.replay.filter_replays_frame` in
  ``foreachBatch`` against the HWMs loaded from Redis, then the same commit;
* (d) ``dropduplicates``: (a) with the key columns decoded by Spark built-ins
  and Spark's ``dropDuplicates(pid, partition, offset)`` on the RocksDB state
  store provider;
* (e) ``kernel``: :func:`sqe.source.replay.filter_replays` on the keys as Arrow
  arrays, no Spark, no Kafka (keys per second; each partition in two calls,
  the second with the HWMs the first returned).

Each of (a)-(d) runs ``--repeat`` times, interleaved and rotated (a b c d, b c d a,
...), each time with a fresh checkpoint and fresh HWMs; the table shows medians and the
ratios to (a).  Then the state each way keeps after a run: HWM entries in Redis
(and their bytes, ``MEMORY USAGE``) against the state store's rows, memory and
RocksDB files (``stateOperators`` of the last query progress, and the size of
the checkpoint's ``state`` directory on disk).

Last, the end-to-end chain of the shipped topologies (``topologies/enrich.yaml``
-> topic -> ``topologies/load.yaml`` -> Redis, their topic names replaced by
fresh ones), run in-process by :func:`sqe.engine.run.runner.run_topology` in mode
``once`` on ``--chain-events`` sample events, ``--repeat`` times
(``--chain-events 0`` skips it).

A local pip broker and a redis-server are started unless ``--brokers`` /
``--redis`` are given; the Redis database given is flushed.  Absolute numbers
depend on the machine and the broker; the ratios from one run are the point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import ROOT, BenchError, rotate
from bench.harness.report import finish, parser, say, service_options
from bench.harness.services import conf_pairs, kafka_and_redis, with_services
from bench.harness.topics import create_topic, fill
from bench.harness.topologies import topology_copy
from sqe.wire.keys import encode_keys

PIDS = (4_411_772_100_000_000_001, -7_000_000_000_000_000_003)
SOURCE_PARTITIONS = 8
VALUE_SIZE = 100
MAX_RETRY = 39  # an upstream retry re-sends 1..MAX_RETRY records
DEFAULT_RECORDS = 200_000  # not 2,000,000: see the module docstring
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
WAYS = ("plain", "pushdown", "dataframe", "dropduplicates")
LABELS = {"plain": "(a) sqe-kafka, no filter",
          "pushdown": "(b) filterReplays in the source",
          "dataframe": "(c) filter_replays_frame",
          "dropduplicates": "(d) dropDuplicates, RocksDB",
          "kernel": "(e) filter kernel, Arrow only"}


# -- the data -------------------------------------------------------------------------------


@dataclass
class Partition:
    """The records of one Kafka partition, in offset order."""

    pid: np.ndarray
    spart: np.ndarray
    soff: np.ndarray

    @property
    def keys(self) -> pa.BinaryArray:
        return encode_keys(self.pid, self.spart, self.soff)


@dataclass
class Data:
    """The whole topic: per Kafka partition its records, and what a filter must drop."""

    partitions: list[Partition]
    replays: int
    distinct: int

    @property
    def records(self) -> int:
        return sum(len(p.soff) for p in self.partitions)


def group_offsets(new: int, replays: int, rng: np.random.Generator) -> np.ndarray:
    """Source offsets of one (pid, partition): ``new`` fresh offsets ``0..new-1`` with
    upstream retries that re-send ``replays`` records in all (loops over retries, not rows)."""
    lengths: list[int] = []
    while sum(lengths) < replays:
        lengths.append(int(rng.integers(1, MAX_RETRY + 1)))
    if lengths:
        lengths[-1] -= sum(lengths) - replays
    if len(lengths) > max(0, new - MAX_RETRY):
        raise BenchError(f"{new} records per group are too few for {replays} replays; "
                         "use more --records or a smaller --replays")
    after = np.sort(rng.choice(np.arange(MAX_RETRY, new), size=len(lengths), replace=False))
    segments, start = [], 0
    for p, k in zip(after.tolist(), lengths, strict=True):
        segments += [np.arange(start, p + 1), np.arange(p + 1 - k, p + 1)]
        start = p + 1
    segments.append(np.arange(start, new))
    return np.concatenate(segments).astype(np.int64)


def make_data(records: int, partitions: int, replay_fraction: float, seed: int = 11) -> Data:
    """The topic's records (see the module docstring); deterministic for a seed."""
    if not 0 <= replay_fraction < 0.5:
        raise BenchError(f"--replays must be at least 0 and below 0.5, got {replay_fraction}")
    rng = np.random.default_rng(seed)
    groups = [(pid, sp) for pid in PIDS for sp in range(SOURCE_PARTITIONS)]
    sizes = np.full(len(groups), records // len(groups))
    sizes[: records % len(groups)] += 1
    per_kafka: list[list[tuple[int, int, np.ndarray]]] = [[] for _ in range(partitions)]
    replays = 0
    for (pid, sp), size in zip(groups, sizes.tolist(), strict=True):
        r = int(round(size * replay_fraction))
        per_kafka[sp % partitions].append((pid, sp, group_offsets(size - r, r, rng)))
        replays += r
    parts = []
    for members in per_kafka:
        if not members:
            parts.append(Partition(np.zeros(0, np.int64), np.zeros(0, np.int32),
                                   np.zeros(0, np.int64)))
            continue
        # Interleave the groups of a Kafka partition; each keeps its own order.
        rank = np.concatenate([(np.arange(len(o)) + rng.random(len(o))) / len(o)
                               for _, _, o in members])
        order = np.argsort(rank, kind="stable")
        pid = np.concatenate([np.full(len(o), p, np.int64) for p, _, o in members])[order]
        spart = np.concatenate([np.full(len(o), s, np.int32) for _, s, o in members])[order]
        soff = np.concatenate([o for _, _, o in members])[order]
        parts.append(Partition(pid, spart, soff))
    return Data(parts, replays, records - replays)


def produce_topic(data: Data, brokers: str, partitions: int) -> str:
    """A fresh topic (``retention.ms=-1``) holding ``data``; returns its name."""
    topic = create_topic(brokers, "bench-replay", partitions)
    value = bytes(range(VALUE_SIZE))
    fill(brokers, topic, ((key, value, number) for number, part in enumerate(data.partitions)
                          for key in part.keys.to_pylist()))  # setup, not measured
    return topic


# -- the consumers ---------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run of one consumer."""

    seconds: float  # wall clock, query start to stop
    batch_seconds: float  # the micro-batches alone (sum of their triggerExecution)
    batches: int
    rows: int
    dropped: int
    progress: Any = None
    state_dir_bytes: int = 0


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


class Consumers:
    """Builds and runs the streaming queries (a)-(d) on one topic."""

    def __init__(self, spark: Any, topic: str, brokers: str, redis_url: str, work: Path,
                 batch_records: int) -> None:
        from sqe.source.kafka import KafkaSource

        self.spark, self.topic, self.brokers = spark, topic, brokers
        self.redis_url, self.work, self.batch_records = redis_url, work, batch_records
        spark.dataSource.register(KafkaSource)

    def _source(self, consumer: str | None) -> Any:
        from sqe.source.kafka import KafkaSource

        options = {"topic": self.topic, "brokers": self.brokers,
                   "maxRecordsPerBatch": str(self.batch_records)}
        if consumer is not None:
            options.update({"filterReplays": "true", "filterReplays.redis.url": self.redis_url,
                            "hwmConsumer": consumer, "emitTally": "true"})
        return self.spark.readStream.format(KafkaSource.name()).options(**options).load()

    def _store(self, consumer: str) -> Any:
        from sqe.ledger.hwm import HwmStore

        store = HwmStore.from_url(self.redis_url, consumer, 172800)
        store.reset()
        return store

    def run(self, way: str, rep: int | str) -> Run:
        from pyspark.sql import functions as F

        from sqe.source.kafka.native import decode_key_columns
        from sqe.source.replay import filter_replays_frame
        from sqe.wire.columns import data_rows

        consumer = f"bench.{way}.{rep}"
        store = self._store(consumer) if way in ("pushdown", "dataframe") else None
        totals = {"rows": 0, "dropped": 0}

        def finish(rows: Any, batch_id: int) -> None:
            groups = rows.groupBy("_pid", "_source_partition").agg(
                F.count("_offset").alias("n"), F.max("_source_offset").alias("hi"),
                F.coalesce(F.sum("_replays_dropped"), F.lit(0)).alias("dropped")).collect()
            totals["rows"] += sum(g["n"] for g in groups)
            totals["dropped"] += sum(g["dropped"] for g in groups)
            if store is not None:
                store.commit(batch_id, {(g["_pid"], g["_source_partition"]): g["hi"]
                                        for g in groups if g["_pid"] is not None
                                        and g["hi"] is not None})

        def sink(batch: Any, batch_id: int) -> None:
            if way == "dataframe":
                assert store is not None
                batch = filter_replays_frame(data_rows(batch), store.load().hwm)
            finish(batch, batch_id)

        frame = self._source(consumer if way == "pushdown" else None)
        if way == "dropduplicates":
            frame = decode_key_columns(frame).dropDuplicates(
                ["_pid", "_source_partition", "_source_offset"])
        checkpoint = self.work / "checkpoints" / consumer
        start = time.perf_counter()
        query = (frame.writeStream.queryName(consumer.replace(".", "_"))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).foreachBatch(sink).start())
        try:
            query.awaitTermination()
        finally:
            if query.isActive:
                query.stop()
        seconds = time.perf_counter() - start
        if query.exception() is not None:
            raise BenchError(f"the {way} query failed: {_first_line(query.exception())}")
        if store is not None:
            store.client.close()
        progress = [_progress_dict(p) for p in query.recentProgress]
        busy = [p for p in progress if p.get("numInputRows", 0) > 0]
        batch_ms = sum(p.get("durationMs", {}).get("triggerExecution", 0) for p in progress)
        return Run(seconds, batch_ms / 1000, len(busy), totals["rows"], totals["dropped"],
                   busy[-1] if busy else None, _dir_bytes(checkpoint / "state"))


def _progress_dict(progress: Any) -> dict[str, Any]:
    """A streaming query progress as a plain dict (PySpark 4 objects and older dicts)."""
    if isinstance(progress, dict):
        return progress
    return json.loads(progress.json)


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if "Error: " in line or "Exception: " in line:
            return line.strip()[:400]
    return (text.splitlines() or [type(exc).__name__])[0][:400]


def kernel(data: Data, repeat: int) -> tuple[float, int]:
    """Median keys/s of :func:`filter_replays` on every partition's keys, and the number of
    keys it drops.  Each partition is filtered in two calls, the second with the HWMs the
    first returned, as two micro-batches would be (so both the stored-mark path and the
    in-call path run)."""
    from sqe.source.replay import filter_replays

    halves = []
    for p in data.partitions:
        keys, middle = p.keys, len(p.soff) // 2
        halves.append((keys.slice(0, middle), keys.slice(middle)))
    times, dropped = [], 0
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        dropped = 0
        for first, second in halves:
            keep, hwm = filter_replays(first, {})
            dropped += int((~keep).sum())
            keep, _ = filter_replays(second, hwm)
            dropped += int((~keep).sum())
        times.append(time.perf_counter() - start)
    return data.records / statistics.median(times), dropped


def state_metrics(progress: dict[str, Any] | None) -> dict[str, int]:
    """Rows, memory and RocksDB metrics of the last progress's first state operator."""
    if progress is None:
        return {}
    ops = progress.get("stateOperators") or []
    if not ops:
        return {}
    op = ops[0]
    custom = op.get("customMetrics") or {}
    out = {"statestore_rows": int(op.get("numRowsTotal", 0)),
           "statestore_memory_bytes": int(op.get("memoryUsedBytes", 0))}
    for name in ("rocksdbSstFileSize", "rocksdbTotalBytesWritten", "rocksdbPinnedBlocksMemoryUsage",
                 "rocksdbCommitCheckpointLatency", "rocksdbCommitFlushLatency"):
        if name in custom:
            out[f"statestore_{name}"] = int(custom[name])
    return out


# -- the chain -------------------------------------------------------------------------------


def run_chain(spark: Any, brokers: str, redis_url: str, work: Path, events: int, repeat: int
              ) -> dict[str, Any]:
    """enrich -> topic -> load -> Redis, in-process with :func:`run_topology` (mode once)."""
    import redis

    from sqe.cli.sample_events import produce_events
    from sqe.config.plan import plan_topology
    from sqe.config.settings import load_config
    from sqe.engine.run.runner import run_topology
    from sqe.lang.topology import load_topology

    config = [load_config(ROOT / "conf" / "local.yaml")]
    conf = conf_pairs(brokers, redis_url)
    client = redis.Redis.from_url(redis_url)
    enrich_s, load_s, total_s = [], [], []
    loaded = 0
    try:
        for rep in range(repeat):
            events_topic = create_topic(brokers, "bench-events")
            enriched_topic = create_topic(brokers, "bench-enriched")
            produce_events(brokers, events_topic, events, partitions=4)
            files = {name: topology_copy(name, source, sink, work / f"chain-{rep}")
                     for name, source, sink in (("enrich", events_topic, enriched_topic),
                                                ("load", enriched_topic, None))}
            client.flushdb()
            times = {}
            for name in ("enrich", "load"):
                plan = plan_topology(load_topology(files[name], name), config, conf)
                start = time.perf_counter()
                run_topology(plan, spark, name, work / f"chain-{rep}" / "checkpoints" / name,
                             "once")
                times[name] = time.perf_counter() - start
            loaded = int(client.hlen("load_log"))
            if loaded != events:
                raise BenchError(f"the chain loaded {loaded} records of {events} events "
                                 f"(repetition {rep + 1})")
            enrich_s.append(times["enrich"])
            load_s.append(times["load"])
            total_s.append(times["enrich"] + times["load"])
    finally:
        client.close()
    return {"chain_events": events, "chain_loaded": loaded,
            "chain_rps": events / statistics.median(total_s),
            "chain_enrich_rps": events / statistics.median(enrich_s),
            "chain_load_rps": events / statistics.median(load_s)}


# -- the report ------------------------------------------------------------------------------


def measure(args: argparse.Namespace, brokers: str, redis_url: str, work: Path
            ) -> dict[str, Any]:
    """Everything the benchmark measures, as the JSON object it prints."""
    import redis

    from sqe.engine.spark.session import build_session

    start = time.perf_counter()
    if args.records == DEFAULT_RECORDS:
        say(f"note: {DEFAULT_RECORDS:,} records by default, not 2,000,000: on a shared 2-core "
            "machine 4 consumers x 3 repetitions of 2,000,000 records take more than the 3 "
            "minutes a default run may; --records 2000000 --batch-records 1000000 runs them")
    data = make_data(args.records, args.partitions, args.replays)
    topic = produce_topic(data, brokers, args.partitions)
    say(f"{data.records:,} records of {VALUE_SIZE} bytes in topic {topic} ({args.partitions} "
        f"partitions, {len(PIDS) * SOURCE_PARTITIONS} (pid, partition) groups): "
        f"{data.replays:,} replays ({data.replays / max(1, data.records):.1%}), "
        f"{data.distinct:,} distinct keys; written in {time.perf_counter() - start:.0f} s")
    result: dict[str, Any] = {"records": data.records, "partitions": args.partitions,
                              "replays": data.replays, "distinct": data.distinct,
                              "batch_records": args.batch_records, "repeat": args.repeat}
    rate, dropped = kernel(data, args.repeat)
    result.update(kernel_keys_per_s=rate, kernel_dropped=dropped)

    spark = build_session("bench-replay", {
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB})
    spark.sparkContext.setLogLevel("ERROR")  # Spark's warnings about its own plans are not ours
    try:
        # Warm-up (not measured): the first query of a JVM pays for class loading, JIT and
        # Python worker start-up; (a) reading a small topic pays it here.
        if args.warm_up:
            warm = make_data(min(args.records, 20_000), args.partitions, args.replays, seed=5)
            warm_consumers = Consumers(spark, produce_topic(warm, brokers, args.partitions),
                                       brokers, redis_url, work, args.batch_records)
            warm_consumers.run("plain", "warm-up")
            say(f"warm-up done at {time.perf_counter() - start:.0f} s")
        consumers = Consumers(spark, topic, brokers, redis_url, work, args.batch_records)
        runs: dict[str, list[Run]] = {w: [] for w in WAYS}
        for rep in range(args.repeat):
            for way in rotate(WAYS, rep):  # each starts once
                runs[way].append(consumers.run(way, rep))
            say(f"repetition {rep + 1} of {args.repeat} at {time.perf_counter() - start:.0f} s "
                "(records/s of the micro-batches): "
                + ", ".join(f"{w} {data.records / runs[w][-1].batch_seconds:,.0f}"
                            for w in WAYS))
        for way in WAYS:
            last = runs[way][-1]
            result[f"{way}_rps"] = data.records / statistics.median(
                r.batch_seconds for r in runs[way])
            result[f"{way}_wall_rps"] = data.records / statistics.median(
                r.seconds for r in runs[way])
            result[f"{way}_batches"] = last.batches
            result[f"{way}_rows"] = last.rows
            result[f"{way}_rows_each"] = sorted({r.rows for r in runs[way]})
        result["pushdown_dropped"] = runs["pushdown"][-1].dropped
        result["dataframe_dropped"] = data.records - runs["dataframe"][-1].rows
        result["dropduplicates_dropped"] = data.records - runs["dropduplicates"][-1].rows
        for way in WAYS[1:]:
            result[f"{way}_vs_plain"] = result[f"{way}_rps"] / result["plain_rps"]
            result[f"{way}_wall_vs_plain"] = (result[f"{way}_wall_rps"]
                                              / result["plain_wall_rps"])
        last_dd = runs["dropduplicates"][-1]
        result.update(state_metrics(last_dd.progress))
        result["statestore_disk_bytes"] = last_dd.state_dir_bytes
        client = redis.Redis.from_url(redis_url)
        try:
            from sqe.ledger.hwm import HwmStore

            store = HwmStore(client, f"bench.pushdown.{args.repeat - 1}", 172800)
            result["hwm_entries"] = len(store.load().hwm)
            result["hwm_bytes"] = sum(int(client.memory_usage(k) or 0) for k in store.keys)
        finally:
            client.close()
        if args.chain_events:
            say(f"chain: enrich -> topic -> load -> Redis on {args.chain_events:,} events, "
                f"{args.repeat} times")
            result.update(run_chain(spark, brokers, redis_url, work, args.chain_events,
                                    args.repeat))
    finally:
        stop_session(spark)
    result["seconds"] = time.perf_counter() - start
    return result


def stop_session(spark: Any) -> None:
    """Stop Spark, first the state stores' maintenance thread (which otherwise may print a
    stack trace when it finds Spark gone)."""
    try:
        spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    except Exception:  # best effort; Spark stops either way
        pass
    spark.stop()


def check(result: dict[str, Any]) -> list[str]:
    """What does not add up: every filter must keep exactly the distinct keys, i.e. drop
    exactly the replays the benchmark produced."""
    problems = []
    distinct, replays = result["distinct"], result["replays"]
    for way in ("pushdown", "dataframe", "dropduplicates"):
        kept = result[f"{way}_rows_each"]
        if kept != [distinct]:
            problems.append(f"{way} kept {' / '.join(f'{k:,}' for k in kept)} rows in its runs, "
                            f"but the topic holds {distinct:,} distinct keys")
    if result["plain_rows_each"] != [result["records"]]:
        problems.append(f"plain read {result['plain_rows_each']} rows of {result['records']:,}")
    if result["pushdown_dropped"] != replays:
        problems.append(f"pushdown counted {result['pushdown_dropped']:,} replays dropped, but "
                        f"the topic holds {replays:,}")
    if result["kernel_dropped"] != replays:
        problems.append(f"the filter kernel dropped {result['kernel_dropped']:,} keys, but the "
                        f"topic holds {replays:,} replays")
    return problems


def table(r: dict[str, Any]) -> list[str]:
    """The human-readable report."""
    lines = [f"records/s, median of {r['repeat']}; 'batches': the micro-batches alone (sum of "
             f"their triggerExecution, {r['plain_batches']} batches of up to "
             f"{r['batch_records']:,} records), 'wall': query start to stop; ratios to (a):",
             f"  {'consumer':34s} {'batches':>10s} {'ratio':>6s} {'wall':>10s} {'ratio':>6s} "
             f"{'rows kept':>10s}"]
    for way in WAYS:
        ratio = "" if way == "plain" else f"{r[f'{way}_vs_plain']:.2f}"
        wall = "" if way == "plain" else f"{r[f'{way}_wall_vs_plain']:.2f}"
        lines.append(f"  {LABELS[way]:34s} {r[f'{way}_rps']:>10,.0f} {ratio:>6s} "
                     f"{r[f'{way}_wall_rps']:>10,.0f} {wall:>6s} {r[f'{way}_rows']:>10,d}")
    lines.append(f"  {LABELS['kernel']:34s} {r['kernel_keys_per_s']:>10,.0f} {'':>6s} "
                 f"{'':>10s} {'':>6s} {r['records'] - r['kernel_dropped']:>10,d}  (keys/s)")
    lines += ["state kept after one run:",
              f"  HWM store (Redis):  {r['hwm_entries']} entries, {r['hwm_bytes']:,} bytes "
              "(MEMORY USAGE of the hwm and ts hashes)",
              f"  RocksDB state store: {r.get('statestore_rows', 0):,} rows, "
              f"{r.get('statestore_memory_bytes', 0):,} bytes memory, "
              f"{r.get('statestore_rocksdbSstFileSize', 0):,} bytes SST files, "
              f"{r['statestore_disk_bytes']:,} bytes in the checkpoint's state directory"]
    if "chain_rps" in r:
        lines += [f"end-to-end chain (sqe.engine.run.runner.run_topology, mode once, {r['chain_events']:,} "
                  f"events, median of {r['repeat']}):",
                  f"  enrich {r['chain_enrich_rps']:,.0f}/s, load {r['chain_load_rps']:,.0f}/s, "
                  f"enrich + load {r['chain_rps']:,.0f} records/s; {r['chain_loaded']:,} "
                  "records in the final store"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    ap.add_argument("--partitions", type=int, default=4, help="Kafka partitions of the topic")
    ap.add_argument("--replays", type=float, default=0.05, help="fraction of replays")
    ap.add_argument("--batch-records", type=int, default=100_000,
                    help="maxRecordsPerBatch of every consumer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chain-events", type=int, default=5_000,
                    help="events through enrich -> load (0: skip the chain)")
    service_options(ap)
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="skip the unmeasured warm-up queries (for smoke tests)")
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.records < 1 or args.batch_records < 1 or args.partitions < 1:
        ap.error("--repeat, --records, --batch-records and --partitions must be at least 1")

    def body(stack: ExitStack, work: Path) -> dict[str, Any]:
        return measure(args, *kafka_and_redis(stack, work, args.brokers, args.redis), work)

    result = with_services(body)
    if result is None:
        return 1
    return finish(table(result), check(result), result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
