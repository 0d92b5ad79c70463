"""Spark's stateful operators in a hop (:class:`sqe.Hop`): the batch's marks come from what the
source read, so a windowed aggregation between the read and the states is exactly once through
replays and a batch that Spark runs again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import sqe
from sqe.cli.local_services import service_conf
from sqe.cli.sample_events import produce_events, sample_events
from sqe.faults import kill_group
from sqe.source.read_report import TaskRead
from sqe.wire.keys import StreamMetadata
from tests.engine.test_exactly_once import crash_enrich_and_run_it_again
from tests.engine.test_hop import PySparkChain, _options
from tests.support import ROOT, stateful_ops
from tests.support.kafka_io import produce, read_topic
from tests.support.stateful_ops import FIELDS, STATE_PROVIDER, deduplicated, region_totals

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
REGIONS = ("eu", "us", "apac")

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]


def _event(i: int) -> dict[str, Any]:
    """Event ``i``: one a second, in a region, with an amount (deterministic)."""
    return {"event_id": f"e{i}", "region": REGIONS[i % 3], "amount": i % 7 + 1,
            "ts": (START + timedelta(seconds=i)).isoformat()}


def _records(events: range, partitions: int = 2) -> list[tuple[bytes, bytes, int]]:
    """The events as an upstream hop writes them: keyed by (pid 7, source partition, offset)."""
    out = []
    for i in events:
        part = i % partitions
        key = StreamMetadata(7, part, i // partitions).to_bytes()
        out.append((key, json.dumps(_event(i)).encode(), part))
    return out


def _windows(events: range) -> dict[tuple[str, str], int]:
    """Each (region, minute window start)'s sum of amounts."""
    sums: dict[tuple[str, str], int] = defaultdict(int)
    for i in events:
        e = _event(i)
        start = (START + timedelta(seconds=i - i % 60)).strftime("%Y-%m-%d %H:%M:%S")
        sums[(e["region"], start)] += e["amount"]
    return dict(sums)


def _by_region(events: range) -> dict[str, int]:
    """Each region's sum of the events' amounts."""
    sums: dict[str, int] = defaultdict(int)
    for i in events:
        sums[_event(i)["region"]] += _event(i)["amount"]
    return dict(sums)


def _cents_by_region(count: int) -> dict[str, int]:
    """Each region's cents (as `enrich` writes it: upper case) of the first ``count`` sample
    events."""
    cents: dict[str, int] = defaultdict(int)
    for event in sample_events(count):
        cents[event["region"].upper()] += event["amount"] * 100
    return dict(cents)


def _windowed(rows: DataFrame, tag: str) -> DataFrame:
    return (rows.withWatermark("ts", "30 seconds")
            .groupBy("region", F.window("ts", "60 seconds"))
            .agg(F.sum("amount").alias("total"))
            .select(F.lit(tag).alias("tag"), "region",
                    F.date_format("window.start", "yyyy-MM-dd HH:mm:ss").alias("window_start"),
                    "total"))


def _loaded(client: redis.Redis, prefix: str) -> dict[tuple[str, str], int]:
    out = {}
    for key in client.keys(f"{prefix}*"):
        region = key.decode().removeprefix(prefix)
        for field, value in client.hgetall(key).items():
            out[(region, field.decode())] = int(value)
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("way", ["foreachBatch", "sink"])
def test_a_windowed_aggregation_in_a_hop_counts_each_record_once_through_replays(
        spark, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path, way):
    topic = kafka_topic(2, "enriched")
    produce(kafka_bootstrap, topic, _records(range(0, 600)))
    tag = f"win-{topic[-6:]}"
    consumer = f"agg_{way}.enriched"
    prefix = f"{tag}:"
    conf = _options(kafka_bootstrap, redis_url, postgres_dsn, more={
        "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": FIELDS,
        "jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    into = [sqe.InsertInto(objectName="sums", stateName="REDIS",
                           fields=["tag", "region", "window_start", "total"],
                           options={"jw.sqe.state.redis.datatype": "HASH",
                                    "jw.sqe.state.redis.keyname.fields": ["tag", "region"],
                                    "jw.sqe.state.redis.fieldname.fields": ["window_start"]}),
            sqe.InsertInto(objectName="window_sums", stateName="POSTGRES",
                           fields=["region", "window_start", "total"],
                           options={"jw.sqe.state.postgres.keyFields":
                                    ["region", "window_start"]})]

    def run(once: bool = False) -> sqe.Hop:
        hop = sqe.Hop(consumer, topic=topic, checkpoint=tmp_path / "ck",
                      deserializer="json", conf=conf, into=into)
        sums = _windowed(hop.read(spark), tag)
        if way == "sink":  # a Python data source's writer takes appended rows only
            writer = hop.write_stream(sums).outputMode("append")
        else:
            writer = (sums.writeStream.option("checkpointLocation", hop.checkpoint)
                      .foreachBatch(hop.exactly_once(lambda rows, batch: [
                          batch.write(name, rows) for name in ("sums", "window_sums")]))
                      .outputMode("update"))
        trigger = {"once": True} if once else {"availableNow": True}
        writer.trigger(**trigger).start().awaitTermination()
        return hop

    def exact(events: range) -> None:
        got = _loaded(client, prefix)
        want = _windows(events)
        assert got == {w: v for w, v in want.items() if w in got}
        # a window is final once the watermark (30 s behind the latest event) passes its end
        final = (START + timedelta(seconds=events.stop - 1 - 30 - 60)).strftime(
            "%Y-%m-%d %H:%M:%S")
        assert {w for w in want if w[1] < final} <= set(got)
        with psycopg.connect(postgres_dsn) as conn:  # a window's row replaced by its newer one
            table = {(r, w): t for r, w, t in conn.execute(
                "SELECT region, window_start, total FROM window_sums").fetchall()}
        assert table == {(r, w): v for (r, w), v in got.items()}

    listeners = len(spark.streams._jsqm.listListeners())
    hop = run()
    client = redis.Redis.from_url(redis_url)
    if way == "foreachBatch":
        assert sum(r.records_read for r in hop.reports) == 600
        deadline = time.monotonic() + 30  # the late-records listener leaves with its query
        while len(spark.streams._jsqm.listListeners()) > listeners:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    exact(range(0, 600))

    # replays of 300 of them (an upstream that ran a batch again), 300 new events, and 5 new
    # records later than the watermark (another producer's), which Spark drops
    late = [(StreamMetadata(9, j % 2, j).to_bytes(),
             json.dumps({**_event(j), "event_id": f"late{j}"}).encode(), j % 2) for j in range(5)]
    produce(kafka_bootstrap, topic, _records(range(100, 400)) + _records(range(600, 900)) + late)
    hop = run()
    if way == "foreachBatch":
        assert sum(r.replays_dropped for r in hop.reports) == 300
        deadline = time.monotonic() + 30  # Spark reports a batch's progress after its commit
        while not any(r.late_dropped for r in hop.reports) and time.monotonic() < deadline:
            time.sleep(0.2)
        # as Spark counts them: rows reaching the state operator, after partial aggregation
        assert 0 < sum(r.late_dropped for r in hop.reports) <= 5
    exact(range(0, 900))

    # A batch whose commit the stores hold, which Spark runs again (its commit log lost: the
    # driver died between the two): its records are read again and filtered by the marks its
    # first run used, so the state Spark computes again from them is the first run's.
    produce(kafka_bootstrap, topic, _records(range(900, 1230)))
    hop = run(once=True)
    assert hop.checkpoint is not None
    commits = Path(hop.checkpoint.removeprefix("file:")) / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    reads = client.keys(f"sqe:{{{consumer}}}:read:*")
    first = client.mget(reads)
    assert sum(TaskRead.load(v).rows for v in first) > 0
    (commits / str(last)).unlink()
    run(once=True)
    assert client.mget(reads) == first  # the same marks, the same records passed
    produce(kafka_bootstrap, topic, _records(range(1230, 1500)))
    run()
    exact(range(0, 1500))
    # the reads of the last batch with records, at most, are left
    assert len(client.keys(f"sqe:{{{consumer}}}:read:*")) <= 2
    assert len(client.keys(f"sqe:{{{consumer}}}:reads:*")) <= 1


@pytest.mark.parametrize("way", ["foreachBatch", "sink"])
def test_an_aggregations_kafka_output_is_keyed_by_batch_and_a_batch_run_again_is_dropped_next(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, way):
    topic, sums_topic = kafka_topic(2, "enriched"), kafka_topic(2, "sums")
    produce(kafka_bootstrap, topic, _records(range(0, 600)))
    tag = f"chain-{topic[-6:]}"
    consumer = f"sum_{way}.enriched"
    common = _options(kafka_bootstrap, redis_url, more={
        "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    kafka_state = sqe.InsertInto(
        objectName=sums_topic, stateName="KAFKA", fields=["tag", "region", "window_start", "total"],
        options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                 "jw.sqe.state.kafka.partitionClass": "SourcePartitionPartitioner"})

    def aggregate(once: bool = False) -> sqe.Hop:
        hop = sqe.Hop(consumer, topic=topic, checkpoint=tmp_path / "sum", deserializer="json",
                      conf={**common, "jw.sqe.spout.fields": FIELDS}, into=[kafka_state])
        sums = _windowed(hop.read(spark), tag)
        writer = hop.write_stream(sums) if way == "sink" else (
            sums.writeStream.option("checkpointLocation", hop.checkpoint)
            .foreachBatch(hop.exactly_once(lambda rows, batch: batch.write(sums_topic, rows))))
        (writer.outputMode("append").trigger(**({"once": True} if once else {"availableNow": True}))
         .start().awaitTermination())
        return hop

    aggregate()
    produce(kafka_bootstrap, topic, _records(range(600, 900)))
    aggregate(once=True)  # the watermark moves past windows that the next batch emits
    # The next batch writes its rows to Kafka and the driver dies before its commits: the HWM
    # store as before the batch, Spark's commit file of it missing.  Spark runs it again: the
    # same rows with the same keys.
    produce(kafka_bootstrap, topic, _records(range(900, 1200)))
    client = redis.Redis.from_url(redis_url)
    held = {k: client.dump(k) for k in client.keys(f"sqe:{{{consumer}}}:*")}
    before = len(read_topic(kafka_bootstrap, sums_topic))
    hop = aggregate(once=True)
    assert len(read_topic(kafka_bootstrap, sums_topic)) > before
    assert hop.checkpoint is not None
    commits = Path(hop.checkpoint.removeprefix("file:")) / "commits"
    (commits / str(max(int(f.name) for f in commits.iterdir() if f.name.isdigit()))).unlink()
    client.delete(*client.keys(f"sqe:{{{consumer}}}:*"))
    for key, value in held.items():
        client.restore(key, 0, value)
    aggregate(once=True)

    records = read_topic(kafka_bootstrap, sums_topic)
    keys = [StreamMetadata.from_bytes(r.key) for r in records]
    assert len(set(keys)) < len(keys)  # the batch's rows are there twice
    pairs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k in keys:
        pairs[(k.pid, k.partition)].append(k.offset)
    for offsets in pairs.values():  # rising in each (pid, partition), but for the copies
        for i, offset in enumerate(offsets):
            assert offset > max(offsets[:i], default=-1) or offset in offsets[:i]

    load = sqe.Hop(f"load_{way}.sums", topic=sums_topic, checkpoint=tmp_path / "load",
                   deserializer="json", conf={**common, "jw.sqe.spout.fields": {
                       "tag": "string", "region": "string", "window_start": "string",
                       "total": "bigint"}},
                   into=[sqe.InsertInto(objectName="sums", stateName="REDIS",
                                        fields=["tag", "region", "window_start", "total"],
                                        options={"jw.sqe.state.redis.datatype": "HASH",
                                                 "jw.sqe.state.redis.keyname.fields":
                                                     ["tag", "region"],
                                                 "jw.sqe.state.redis.fieldname.fields":
                                                     ["window_start"]})])
    (load.read(spark).writeStream.option("checkpointLocation", load.checkpoint)
     .trigger(availableNow=True)
     .foreachBatch(load.exactly_once(lambda rows, batch: batch.write("sums", rows)))
     .start().awaitTermination())
    assert sum(r.replays_dropped for r in load.reports) == len(keys) - len(set(keys))
    got = _loaded(client, f"{tag}:")
    want = _windows(range(0, 1200))
    assert len(got) > before  # each window once, final
    assert got == {w: want[w] for w in got}


class SumsChain(PySparkChain):
    """examples/pyspark_chain.py's enrich, then examples/windowed_sums.py, as subprocesses."""

    def __init__(self, *args: Any, sums: str) -> None:
        super().__init__(*args)
        self.sums = sums

    def command(self, name: str, checkpoint: str | None = None, *extra: str) -> list[str]:
        if name != "sums":
            return super().command(name, checkpoint, *extra)
        return [sys.executable, str(ROOT / "examples/windowed_sums.py"), "--once",
                "--enriched", self.enriched, "--sums", self.sums,
                "--checkpoint", str(self.tmp / (checkpoint or "ck")),
                "--config", str(ROOT / "conf/local.yaml"),
                *service_conf(self.kafka, self.redis_url, self.dsn), *extra]


def _next_hop(records: list[Any]) -> list[Any]:
    """The records a next hop's replay filter passes, in order."""
    marks: dict[tuple[int, int], int] = {}
    kept = []
    for r in records:
        k = StreamMetadata.from_bytes(r.key)
        if k.offset > marks.get((k.pid, k.partition), -1):
            marks[(k.pid, k.partition)] = k.offset
            kept.append(r)
    return kept


@pytest.mark.slow
@pytest.mark.postgres
def test_the_windowed_example_is_exactly_once_through_kills_and_replays(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    sums = kafka_topic(2, "sums")
    chain = SumsChain(tmp_path, kafka_bootstrap, events, enriched, redis_url, postgres_dsn,
                      sums=sums)
    count = 2000
    produce_events(kafka_bootstrap, events, count, partitions=2)
    expected = {f"e{i}" for i in range(count)}
    records = crash_enrich_and_run_it_again(chain, expected)  # `enriched` holds replays
    cents = _cents_by_region(count)

    # the hop dies with batch 1's states written, before its commit; run again, it writes
    # batch 1 again (the same rows, the same keys) and goes on
    batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=700")
    proc, _ = chain.start_with_fault("sums", "before-commit@1", "wait", *batch)
    chain.wait(proc, "sums", "before-commit@1")
    kill_group(proc)
    done = chain.run("sums", *batch)
    assert done.returncode == 0, done.stderr[-3000:]
    dropped = sum(int(n) for n in re.findall(r"(\d+) replays dropped", done.stdout))
    assert 0 < dropped <= len(records) - count

    client = redis.Redis.from_url(redis_url)
    by_region = {region: sum(int(v) for v in client.hgetall(region).values())
                 for region in cents}
    assert by_region == cents  # every window's last value: each event counted once
    out = read_topic(kafka_bootstrap, sums)
    kept = _next_hop(out)
    assert len(kept) < len(out)  # batch 1's copies, dropped by the next hop
    last = {}
    for r in kept:
        row = json.loads(r.value)
        last[(row["region"], row["minute"])] = row
    assert sum(row["events"] for row in last.values()) == count
    assert {(k[0], k[1]): row["cents"] for k, row in last.items()} == {
        (region, minute.decode()): int(v) for region in cents
        for minute, v in client.hgetall(region).items()}


@pytest.mark.parametrize("operator", ["sliding", "session", "dedup"])
def test_sliding_and_session_windows_and_a_watermark_deduplication_count_each_record_once(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, operator):
    topic, out = kafka_topic(2, "enriched"), kafka_topic(2, "out")
    twice = [(StreamMetadata(8, part, i // 2).to_bytes(), value, part)  # another producer's
             for i, (_, value, part) in enumerate(_records(range(0, 300)))]
    produce(kafka_bootstrap, topic, _records(range(0, 300)) + twice)
    produce(kafka_bootstrap, topic, _records(range(100, 200)))  # replays
    tag = f"{operator}-{topic[-6:]}"
    conf = _options(kafka_bootstrap, redis_url, more={
        "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": FIELDS,
        "jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    fields = ["tag", "region", "window", "total"]
    hop = sqe.Hop(f"{operator}.enriched", topic=topic, checkpoint=tmp_path / "ck",
                  deserializer="json", conf=conf, into=[
                      sqe.InsertInto(objectName="sums", stateName="REDIS", fields=fields,
                                     options={"jw.sqe.state.redis.datatype": "HASH",
                                              "jw.sqe.state.redis.keyname.fields":
                                                  ["tag", "region"],
                                              "jw.sqe.state.redis.fieldname.fields":
                                                  ["window"]}),
                      sqe.InsertInto(objectName=out, stateName="KAFKA", fields=fields, options={
                          "jw.sqe.state.kafka.keytype": "StreamMetadata",
                          "jw.sqe.state.kafka.partitionClass": "SourcePartitionPartitioner"})])
    rows = hop.read(spark)
    if operator == "dedup":  # each event once, though two producers sent it
        frame, mode = deduplicated(rows), "append"
    else:
        rows = rows.withWatermark("ts", "30 seconds")
        # a region's events are 3 s apart: a session of a 2 s gap holds one event
        window = (F.window("ts", "60 seconds", "30 seconds") if operator == "sliding"
                  else F.session_window("ts", "2 seconds"))
        frame = (rows.where(F.col("_pid") == 7).groupBy("region", window.alias("w"))
                 .agg(F.sum("amount").alias("total"))
                 .select("region", F.col("w.start").cast("string").alias("window"), "total"))
        mode = "update" if operator == "sliding" else "append"  # Spark's rule for sessions

    def write(batch_rows: DataFrame, batch: Any) -> None:
        batch.write("sums", batch_rows)
        batch.write(out, batch_rows)

    (frame.withColumn("tag", F.lit(tag)).writeStream.outputMode(mode)
     .option("checkpointLocation", hop.checkpoint).trigger(availableNow=True)
     .foreachBatch(hop.exactly_once(write)).start().awaitTermination())
    assert sum(r.replays_dropped for r in hop.reports) == 100
    client = redis.Redis.from_url(redis_url)
    totals: dict[str, int] = defaultdict(int)
    for (region, _), value in _loaded(client, f"{tag}:").items():
        totals[region] += value
    want = _by_region(range(300))
    if operator == "sliding":  # every instant lies in two windows of a minute sliding by 30 s
        assert totals == {r: 2 * v for r, v in want.items()}
    elif operator == "session":  # each closed once the watermark (30 s) passed its end
        sessions = {(e["region"], (START + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S")):
                    e["amount"] for i in range(300) for e in [_event(i)]}
        got = _loaded(client, f"{tag}:")
        assert got == {k: v for k, v in sessions.items() if k in got}
        assert len(got) >= 300 - 33
    else:
        assert totals == want
        ids = [json.loads(r.value)["window"] for r in read_topic(kafka_bootstrap, out)]
        assert sorted(ids) == sorted(f"e{i}" for i in range(300))


def test_transform_with_state_in_pandas_in_a_hop_keeps_each_record_once(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    cloudpickle.register_pickle_by_value(stateful_ops)  # the workers cannot import tests
    topic = kafka_topic(2, "enriched")
    produce(kafka_bootstrap, topic, _records(range(0, 400)) + _records(range(50, 250)))
    tag = f"tws-{topic[-6:]}"

    def run(once: bool = False) -> sqe.Hop:
        hop = sqe.Hop("tws.enriched", topic=topic, checkpoint=tmp_path / "ck",
                      deserializer="json", conf=_options(kafka_bootstrap, redis_url, more={
                          "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": FIELDS,
                          "jw.sqe.spout.kafka.maxRecordsPerBatch": 150}),
                      into=[sqe.InsertInto(objectName="totals", stateName="REDIS",
                                           fields=["tag", "region", "total"],
                                           options={"jw.sqe.state.redis.keyname.fields":
                                                    ["tag", "region"]})])
        totals = region_totals(hop.read(spark)).withColumn("tag", F.lit(tag))
        (totals.writeStream.outputMode("update").option("checkpointLocation", hop.checkpoint)
         .trigger(**({"once": True} if once else {"availableNow": True}))
         .foreachBatch(hop.exactly_once(lambda rows, batch: batch.write("totals", rows)))
         .start().awaitTermination())
        return hop

    provider = STATE_PROVIDER[0]  # the processor's state needs it
    spark.conf.set(*STATE_PROVIDER)
    client = redis.Redis.from_url(redis_url)
    try:
        hop = run()
        assert sum(r.replays_dropped for r in hop.reports) == 200
        want = _by_region(range(400))
        assert {r: int(client.get(f"{tag}:{r}")) for r in want} == want
        # RocksDB's state through the two ways Spark runs a batch again: its commit file lost
        # after the stores committed it (run through, writing nothing), and the driver dead
        # before the HWM commit (the store as before it: run again, the same totals written)
        produce(kafka_bootstrap, topic, _records(range(400, 600)))
        held = {k: client.dump(k) for k in client.keys("sqe:{tws.enriched}:*")}
        hop = run(once=True)
        commits = Path(str(hop.checkpoint).removeprefix("file:")) / "commits"
        last = commits / str(max(int(f.name) for f in commits.iterdir() if f.name.isdigit()))
        last.unlink()
        assert [r.skipped for r in run(once=True).reports] == [True]
        last.unlink()
        client.delete(*client.keys("sqe:{tws.enriched}:*"))
        for key, value in held.items():
            client.restore(key, 0, value)
        assert [r.skipped for r in run(once=True).reports] == [False]
        produce(kafka_bootstrap, topic, _records(range(600, 700)) + _records(range(500, 550)))
        hop = run()
        assert sum(r.replays_dropped for r in hop.reports) == 50
    finally:
        spark.conf.unset(provider)
    want = _by_region(range(700))
    assert {r: int(client.get(f"{tag}:{r}")) for r in want} == want


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.connect
def test_the_windowed_example_over_spark_connect(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    chain = SumsChain(tmp_path, kafka_bootstrap, events, enriched, redis_url, postgres_dsn,
                      sums=kafka_topic(2, "sums"))
    produce_events(kafka_bootstrap, events, 1000, partitions=2)
    remote = ("--remote", connect_server.url)
    done = chain.run("enrich", *remote)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_topic(kafka_bootstrap, enriched)
    produce(kafka_bootstrap, enriched, [(r.key, r.value, r.partition) for r in records[:300]])
    done = chain.run("sums", *remote, "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=400")
    assert done.returncode == 0, done.stderr[-3000:]
    cents = _cents_by_region(1000)
    client = redis.Redis.from_url(redis_url)
    # the 300 copies counted once: each region's minutes add up to its events' amounts
    assert {r: sum(int(v) for v in client.hgetall(r).values()) for r in cents} == cents


@pytest.mark.slow
@pytest.mark.connect
@pytest.mark.parametrize("operator", ["dedup", "tws"])
def test_a_deduplication_and_transform_with_state_over_spark_connect_count_each_record_once(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, tmp_path, operator):
    topic, out = kafka_topic(2, "enriched"), kafka_topic(2, "out")
    tag = f"{operator}-{topic[-6:]}"
    command = [sys.executable, "-m", "tests.support.stateful_ops", "--remote",
               connect_server.url, "--operator", operator, "--topic", topic, "--out", out,
               "--checkpoint", str(tmp_path / "ck"), "--tag", tag,
               *service_conf(kafka_bootstrap, redis_url, None),
               "--conf", "jw.sqe.spout.kafka.startingOffsets=earliest"]

    def other_producer(events: range) -> list[tuple[bytes, bytes, int]]:
        """The same events from another producer (pid 8), which the deduplication drops."""
        if operator != "dedup":
            return []
        return [(StreamMetadata(8, part, i // 2).to_bytes(), value, part)
                for i, (_, value, part) in zip(events, _records(events), strict=True)]

    def run() -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]

    produce(kafka_bootstrap, topic, _records(range(0, 300)) + other_producer(range(0, 300))
            + _records(range(100, 200)))  # the last: replays
    run()
    produce(kafka_bootstrap, topic, _records(range(250, 300)) + _records(range(300, 450))
            + other_producer(range(300, 450)))
    run()
    client = redis.Redis.from_url(redis_url)
    want = _by_region(range(450))
    if operator == "tws":
        assert {r: int(client.get(f"{tag}:{r}")) for r in want} == want
        return
    totals: dict[str, int] = defaultdict(int)
    for (region, _), value in _loaded(client, f"{tag}:").items():
        totals[region] += value
    assert totals == want
    ids = [json.loads(r.value)["window"] for r in read_topic(kafka_bootstrap, out)]
    assert sorted(ids) == sorted(f"e{i}" for i in range(450))
