"""Spark's stateful operators in a hop (:class:`sqe.Hop`): the batch's marks come from what the
source read, so a windowed aggregation between the read and the states is exactly once through
replays and a batch that Spark runs again."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import sqe
from sqe.source.read_report import TaskRead
from sqe.wire.keys import StreamMetadata
from tests.engine.test_hop import _options
from tests.support.kafka_io import produce, read_topic

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
REGIONS = ("eu", "us", "apac")
FIELDS = {"event_id": "string", "region": "string", "amount": "bigint", "ts": "timestamp"}


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


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.parametrize("way", ["foreachBatch", "sink"])
def test_a_windowed_aggregation_in_a_hop_counts_each_record_once_through_replays(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, way):
    topic = kafka_topic(2, "enriched")
    produce(kafka_bootstrap, topic, _records(range(0, 600)))
    tag = f"win-{topic[-6:]}"
    consumer = f"agg_{way}.enriched"
    prefix = f"{tag}:"
    conf = _options(kafka_bootstrap, redis_url, more={
        "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": FIELDS,
        "jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    into = [sqe.InsertInto(objectName="sums", stateName="REDIS",
                           fields=["tag", "region", "window_start", "total"],
                           options={"jw.sqe.state.redis.datatype": "HASH",
                                    "jw.sqe.state.redis.keyname.fields": ["tag", "region"],
                                    "jw.sqe.state.redis.fieldname.fields": ["window_start"]})]

    def run(once: bool = False) -> sqe.Hop:
        hop = sqe.Hop(consumer, topic=topic, checkpoint=tmp_path / "ck",
                      deserializer="json", conf=conf, into=into)
        sums = _windowed(hop.read(spark), tag)
        if way == "sink":  # a Python data source's writer takes appended rows only
            writer = hop.write_stream(sums).outputMode("append")
        else:
            writer = (sums.writeStream.option("checkpointLocation", hop.checkpoint)
                      .foreachBatch(hop.exactly_once(
                          lambda rows, batch: batch.write("sums", rows))).outputMode("update"))
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

    hop = run()
    client = redis.Redis.from_url(redis_url)
    if way == "foreachBatch":
        assert sum(r.records_read for r in hop.reports) == 600
    exact(range(0, 600))

    # replays of 300 of them (an upstream that ran a batch again) and 300 new events
    produce(kafka_bootstrap, topic, _records(range(100, 400)) + _records(range(600, 900)))
    hop = run()
    if way == "foreachBatch":
        assert sum(r.replays_dropped for r in hop.reports) == 300
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


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_an_aggregations_kafka_output_is_keyed_by_batch_and_a_batch_run_again_is_dropped_next(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    topic, sums_topic = kafka_topic(2, "enriched"), kafka_topic(2, "sums")
    produce(kafka_bootstrap, topic, _records(range(0, 600)))
    tag = f"chain-{topic[-6:]}"
    common = _options(kafka_bootstrap, redis_url, more={
        "jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    kafka_state = sqe.InsertInto(
        objectName=sums_topic, stateName="KAFKA", fields=["tag", "region", "window_start", "total"],
        options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                 "jw.sqe.state.kafka.partitionClass": "SourcePartitionPartitioner"})
    failing = {"batch": 2}

    def aggregate() -> sqe.Hop:
        hop = sqe.Hop("sum.enriched", topic=topic, checkpoint=tmp_path / "sum",
                      deserializer="json", conf={**common, "jw.sqe.spout.fields": FIELDS},
                      into=[kafka_state])

        def write(rows: DataFrame, batch: Any) -> None:
            batch.write(sums_topic, rows)
            if batch.id == failing.get("batch"):  # its records are in Kafka, not committed
                failing.clear()
                raise RuntimeError("the driver fails after the Kafka state was written")

        (_windowed(hop.read(spark), tag).writeStream.outputMode("update")
         .option("checkpointLocation", hop.checkpoint).trigger(availableNow=True)
         .foreachBatch(hop.exactly_once(write)).start().awaitTermination())
        return hop

    with pytest.raises(Exception, match="the driver fails after the Kafka state was written"):
        aggregate()
    aggregate()  # Spark runs batch 2 again: the same rows, the same keys
    records = read_topic(kafka_bootstrap, sums_topic)
    keys = [StreamMetadata.from_bytes(r.key) for r in records]
    assert len(set(keys)) < len(keys)  # batch 2's rows are there twice
    pairs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k in keys:
        pairs[(k.pid, k.partition)].append(k.offset)
    for offsets in pairs.values():  # rising in each (pid, partition), but for the copies
        for i, offset in enumerate(offsets):
            assert offset > max(offsets[:i], default=-1) or offset in offsets[:i]

    load = sqe.Hop("load.sums", topic=sums_topic, checkpoint=tmp_path / "load",
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
    got = _loaded(redis.Redis.from_url(redis_url), f"{tag}:")
    assert got == _windows(range(0, 600))
