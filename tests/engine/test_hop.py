"""SQE from plain PySpark (:class:`sqe.Hop`): the README's chain as examples/pyspark_chain.py,
with a join with a static table and a pandas UDF, through the crashes of test_exactly_once, and
what a user's code gets wrong said in one sentence."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from pyspark.sql import functions as F

import sqe
from sqe.cli.local_services import service_conf
from sqe.cli.sample_events import produce_events
from sqe.engine.batch.hop_batch import reorders
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from sqe.wire.keys import StreamMetadata
from tests.engine.test_exactly_once import (
    Chain,
    _assert_each_event_once,
    _postgres_rows,
    _redis_view,
    crash_enrich_and_run_it_again,
)
from tests.engine.test_query_starts import slow_planner
from tests.support import ROOT
from tests.support.kafka_io import produce, read_topic

EVENTS = 3000


class PySparkChain(Chain):
    """examples/pyspark_chain.py on fresh topics, as subprocesses (each hop's --once run)."""

    def __init__(self, tmp: Path, kafka: str, events: str, enriched: str, redis_url: str,
                 dsn: str) -> None:
        self.tmp, self.kafka, self.redis_url, self.dsn = tmp, kafka, redis_url, dsn
        self.events, self.enriched = events, enriched

    def command(self, name: str, checkpoint: str | None = None, *extra: str) -> list[str]:
        return [sys.executable, str(ROOT / "examples/pyspark_chain.py"), name, "--once",
                "--events", self.events, "--enriched", self.enriched,
                "--checkpoint", str(self.tmp / (checkpoint or "ck")),
                "--config", str(ROOT / "conf/local.yaml"),
                *service_conf(self.kafka, self.redis_url, self.dsn), *extra]


def slow_chain(test: Any) -> Any:
    """The marks of a test that runs the example's chain, slow, on every service."""
    for mark in (pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis,
                 pytest.mark.postgres):
        test = mark(test)
    return test


def pyspark_chain(tmp: Path, kafka: str, kafka_topic: Any, redis_url: str, dsn: str,
                  events: int = EVENTS) -> PySparkChain:
    """examples/pyspark_chain.py on two fresh topics of two partitions, ``events`` events in
    the first (``e0``, ``e1``, ...)."""
    source, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    produce_events(kafka, source, events, partitions=2)
    return PySparkChain(tmp, kafka, source, enriched, redis_url, dsn)


def _options(kafka: str, redis_url: str, dsn: str | None = None,
             more: dict[str, Any] | None = None) -> dict[str, Any]:
    """A hop's options on these services (as ``sqe run --conf`` points a run at them), read from
    the earliest offsets, with ``more``."""
    pairs = (pair.split("=", 1) for pair in service_conf(kafka, redis_url, dsn)[1::2])
    return {**dict(pairs), "jw.sqe.spout.kafka.startingOffsets": "earliest", **(more or {})}


@slow_chain
def test_the_chain_in_plain_pyspark_is_exactly_once_through_crashes(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    chain = pyspark_chain(tmp_path, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn)
    expected = {f"e{i}" for i in range(EVENTS)}

    records = crash_enrich_and_run_it_again(chain, expected)
    values = [json.loads(r.value) for r in records]
    assert all(v["amount_cents"] == v["amount"] * 100 for v in values)  # the pandas UDF
    assert all(v["tier"] == ("gold" if int(v["user"][1:]) % 10 == 0 else "basic")
               for v in values)  # the static table

    # 3. load dies after its states were written, before its HWM commit; the restart runs the
    #    batch again: Postgres holds it already, Redis applies it once, replays are dropped.
    batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=2000")
    proc, _ = chain.start_with_fault("load", "before-commit", "wait", *batch)
    chain.wait(proc, "load", "before-commit")
    kill_group(proc)
    assert 0 < len(_postgres_rows(postgres_dsn)) <= 2000
    assert _redis_view(redis_url)["log"] == {}
    done = chain.run("load", *batch)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded_events held this batch already" in done.stderr + done.stdout
    dropped = [int(n) for n in re.findall(r"(\d+) replays dropped", done.stdout)]
    assert sum(dropped) == len(records) - EVENTS
    _assert_each_event_once(chain, expected)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.connect
def test_the_chain_in_plain_pyspark_over_spark_connect(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    chain = pyspark_chain(tmp_path, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, 1000)
    remote = ("--remote", connect_server.url)
    for hop in ("enrich", "load"):
        done = chain.run(hop, *remote)
        assert done.returncode == 0, done.stderr[-3000:]
    _assert_each_event_once(chain, {f"e{i}" for i in range(1000)})


@slow_chain
def test_hop_run_starts_again_a_query_whose_planner_did_not_connect_back_in_time(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    """The example's enrich hop (``hop.run``) whose stream planner starts 12 s late once: the
    query fails with Spark's "Python worker failed to connect back", is started again from its
    checkpoint with a warning, and the chain holds every event once."""
    chain = pyspark_chain(tmp_path, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, 1000)
    done = subprocess.run(chain.command("enrich"), capture_output=True, text=True, timeout=900,
                          env={**os.environ, **slow_planner(tmp_path, slow_starts=1)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("warning: enrich.events: a Python process Spark started for the query did not "
            "connect back within Spark's 10 s (a busy machine); starting the query again from "
            "its checkpoint (2 of 3)") in done.stderr, done.stderr[-3000:]
    assert len((tmp_path / "starts").read_text().split()) >= 2
    loaded = chain.run("load")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    _assert_each_event_once(chain, {f"e{i}" for i in range(1000)})


@slow_chain
def test_two_runs_of_a_hop_on_one_checkpoint_stop_one_in_a_sentence_and_lose_nothing(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    # sqe.Hop takes no lock on its checkpoint (sqe run does).  The first run staged its Redis
    # rows and is about to commit; the second runs the same batch and opens its states, which
    # cleared the stage both runs shared (1 race in 4 lost a batch's Redis rows so, and this
    # order lost all 3,000); the first commits; the second stages too late and is stopped by
    # Spark, which said only "[STREAM_FAILED] Query [id = ..., runId = ...] terminated with
    # exception: [CONCURRENT_STREAM_LOG_UPDATE] ...".
    chain = pyspark_chain(tmp_path, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn)
    assert chain.run("enrich").returncode == 0
    command = chain.command("load", None, "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=5000")
    markers = [tmp_path / "first.marker", tmp_path / "second.marker"]
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    runs = [start_with_fault(command, "before-commit", markers[0], logs[0], "resume")]
    try:
        wait_for_fault(runs[0], markers[0], logs[0])
        runs.append(start_with_fault(command, "before-stage", markers[1], logs[1], "resume"))
        wait_for_fault(runs[1], markers[1], logs[1])
        markers[0].unlink()  # the first commits batch 0 and ends
        assert runs[0].wait(600) == 0, logs[0].read_text()[-3000:]
        markers[1].unlink()  # the second stages it now, and finds it committed
        runs[1].wait(600)
    finally:
        for run in runs:
            if run.poll() is None:
                kill_group(run)  # a run that did not end: its driver and its JVM
    said = logs[1].read_text().strip().splitlines()
    assert runs[1].returncode == 1 and re.fullmatch(
        r"error: another run of this stream wrote batch 0 to its checkpoint at the same time "
        r"\(CONCURRENT_STREAM_LOG_UPDATE: two runs of one hop with one checkpoint\), so this "
        r"one stopped and the other goes on; what the batches committed stays committed: run "
        r"one at a time per checkpoint", said[-1]), said[-20:]
    assert chain.run("load").returncode == 0
    _assert_each_event_once(chain, {f"e{i}" for i in range(EVENTS)})


def test_a_shuffle_or_a_sort_is_found_in_a_plan_and_a_broadcast_is_not():
    assert reorders("+- Exchange hashpartitioning(user#1, 2), ENSURE_REQUIREMENTS, [plan_id=7]")
    assert reorders("*(2) Sort [user#1 ASC NULLS FIRST], false, 0")
    assert reorders("Exchange RoundRobinPartitioning(4), REPARTITION_BY_NUM")
    assert not reorders("BroadcastExchange HashedRelationBroadcastMode(List(input[0]))")
    assert not reorders("*(1) Project [user#1]\n+- BroadcastHashJoin [user#1], [user#9]")


@pytest.mark.spark
@pytest.mark.parametrize("carried,expected", [
    ({}, 500),  # the session carries nothing: the hop's own plan
    ({"spark.jw.sqe.spout.kafka.maxRecordsPerBatch": "700"}, 700),  # spark-submit --conf
])
def test_a_hop_is_planned_as_sqe_run_is_with_the_session_s_options_on_top(
        spark, monkeypatch, carried, expected):
    # the one planning function of sqe run (sqe/engine/run/planning.py); the session's conf is
    # the stand-in: a SparkContext's conf cannot change once it runs
    from sqe.engine.run import planning

    hop = sqe.Hop("carried.events", topic="t", conf={
        "jw.sqe.spout.kafka.brokers": "localhost:9092",
        "jw.sqe.spout.kafka.maxRecordsPerBatch": 500})
    real = planning.session_conf(spark)
    monkeypatch.setattr(planning, "session_conf", lambda session: [*real, *carried.items()])
    plan = hop._in(spark)
    assert plan.streams["events"].max_records == expected
    assert (plan is hop.plan) == (not carried)


def test_a_hop_with_a_bad_option_or_state_is_refused_in_located_sentences(tmp_path):
    with pytest.raises(sqe.OptionError, match="a consumer is <topology>.<stream>"):
        sqe.Hop("enriched", topic="t", checkpoint=tmp_path)
    with pytest.raises(sqe.TopologyError) as info:
        sqe.Hop("load.enriched", topic="t", checkpoint=tmp_path, deserializer="json",
                conf={"jw.sqe.spout.kafka.brokers": "localhost:9092"},
                into=[{"objectName": "x", "stateName": "REDIS", "fields": []},
                      sqe.InsertInto(objectName="y", stateName="KAFKA", fields=["a"])])
    text = str(info.value)
    assert "hop load.enriched: command 2" in text and "fields" in text
    with pytest.raises(sqe.TopologyError, match="deserializer json needs every field declared"):
        sqe.Hop("load.enriched", topic="t", checkpoint=tmp_path, deserializer="json",
                conf={"jw.sqe.spout.kafka.brokers": "localhost:9092"})


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_what_a_users_code_gets_wrong_fails_the_batch_in_one_sentence(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    topic = kafka_topic(2, "enriched")
    produce_events(kafka_bootstrap, topic, 50, partitions=2)
    conf = _options(kafka_bootstrap, redis_url, more={
        "jw.sqe.spout.kafka.filterReplays": True,
        "jw.sqe.spout.fields": {"event_id": "string", "region": "string", "amount": "bigint"}})
    into = [sqe.InsertInto(objectName="by_region", stateName="REDIS",
                           fields=["region", "event_id", "amount"],
                           options={"jw.sqe.state.redis.datatype": "HASH",
                                    "jw.sqe.state.redis.keyname.fields": ["region"],
                                    "jw.sqe.state.redis.fieldname.fields": ["event_id"]})]

    def failure(name: str, transform, write) -> str:  # type: ignore[no-untyped-def]
        hop = sqe.Hop(f"wrong.{name}", topic=topic, checkpoint=tmp_path / name,
                      deserializer="json", conf=conf, into=into)
        query = (transform(hop.read(spark)).writeStream
                 .option("checkpointLocation", hop.checkpoint).trigger(availableNow=True)
                 .foreachBatch(hop.exactly_once(write)).start())
        with pytest.raises(Exception) as info:
            query.awaitTermination()
        return str(info.value)

    missing = failure("missing", lambda r: r, lambda rows, batch: batch.write(
        "by_region", rows.drop("event_id")))
    assert ("hop wrong.missing batch 0, state by_region: the frame has no column event_id of "
            "the state's fields region, event_id, amount" in missing)
    unwritten = failure("unwritten", lambda r: r, lambda rows, batch: None)
    assert "the function wrote no frame to state by_region" in unwritten
    unknown = failure("unknown", lambda r: r, lambda rows, batch: batch.write("nope", rows))
    assert "it has no state nope (its states: by_region)" in unknown
    assert redis.Redis.from_url(redis_url).keys("by_region*") == []  # nothing was committed


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.parametrize("shuffled_in", ["the stream", "the function"])
def test_a_kafka_states_frame_that_a_shuffle_reordered_is_written_in_source_order(
        shuffled_in, spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    source, dest = kafka_topic(2, "events"), kafka_topic(2, "out")
    produce_events(kafka_bootstrap, source, 600, partitions=2)
    hop = sqe.Hop("shuffled.events", topic=source, checkpoint=tmp_path / "ck",
                  deserializer="json",
                  conf=_options(kafka_bootstrap, redis_url, more={
                      "jw.sqe.spout.kafka.maxRecordsPerBatch": 200,
                      "jw.sqe.spout.fields": {"event_id": "string"}}),
                  into=[sqe.InsertInto(objectName=dest, stateName="KAFKA",
                                       fields=["event_id", "noise"],
                                       options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                                "jw.sqe.state.kafka.partitionClass":
                                                    "SourcePartitionPartitioner"})])
    rows = hop.read(spark).withColumn("noise", F.rand())
    if shuffled_in == "the stream":
        rows = rows.repartition(3)  # spreads each source partition over three tasks

    def write(batch_rows, batch):  # type: ignore[no-untyped-def]
        batch.write(dest, batch_rows.repartition(3) if shuffled_in == "the function"
                    else batch_rows)

    with caplog.at_level(logging.WARNING, logger="sqe"):
        (rows.writeStream.option("checkpointLocation", hop.checkpoint)
         .trigger(availableNow=True).foreachBatch(hop.exactly_once(write)).start()
         .awaitTermination())
    records = read_topic(kafka_bootstrap, dest)
    keys = [StreamMetadata.from_bytes(r.key) for r in records]
    assert len(set(keys)) == len(records) == 600
    assert all(k.partition == r.partition for k, r in zip(keys, records, strict=True))
    for partition in (0, 1):  # each source partition's records in source order
        offsets = [k.offset for k in keys if k.partition == partition]
        assert offsets == sorted(offsets)
    said = [r.getMessage() for r in caplog.records if r.name == "sqe"]
    assert sum("is shuffled or sorted after the read" in m for m in said) == 1, said
    assert sum("is not deterministic" in m for m in said) == 1, said
    assert len(hop.reports) == 3


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_the_sqe_hop_sink_writes_a_chain_once_and_a_batch_run_again_commits_nothing(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    produce_events(kafka_bootstrap, events, 400, partitions=2)
    common = _options(kafka_bootstrap, redis_url,
                      more={"jw.sqe.spout.kafka.maxRecordsPerBatch": 150})
    enrich = sqe.Hop("enrich.events", topic=events, checkpoint=tmp_path / "enrich",
                     deserializer="json", conf={**common, "jw.sqe.spout.fields": {
                         "event_id": "string", "region": "string", "amount": "bigint"}},
                     into=[sqe.InsertInto(objectName=enriched, stateName="KAFKA",
                                          fields=["event_id", "region", "cents"],
                                          options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                                   "jw.sqe.state.kafka.partitionClass":
                                                       "SourcePartitionPartitioner"})])
    rows = enrich.read(spark).withColumn("cents", F.col("amount") * 100)
    enrich.write_stream(rows).trigger(availableNow=True).start().awaitTermination()
    records = read_topic(kafka_bootstrap, enriched)
    assert len(records) == 400
    produce(kafka_bootstrap, enriched, [(r.key, r.value, r.partition) for r in records[:50]])

    def load(checkpoint: str = "load") -> sqe.Hop:
        hop = sqe.Hop(
            "load.enriched", topic=enriched, checkpoint=tmp_path / checkpoint,
            deserializer="json",
            conf={**common, "jw.sqe.spout.kafka.filterReplays": True,
                  "jw.sqe.spout.fields": {"event_id": "string", "region": "string",
                                          "cents": "bigint"}},
            into=[sqe.InsertInto(objectName="by_region", stateName="REDIS",
                                 fields=["region", "event_id", "cents"],
                                 options={"jw.sqe.state.redis.datatype": "HASH",
                                          "jw.sqe.state.redis.keyname.fields": ["region"],
                                          "jw.sqe.state.redis.fieldname.fields": ["event_id"]})])
        hop.write_stream(hop.read(spark)).trigger(availableNow=True).start().awaitTermination()
        return hop

    hop = load()
    client = redis.Redis.from_url(redis_url)
    loaded = [e for k in client.keys("*") if not k.startswith(b"sqe:")
              for e in client.hkeys(k)]
    assert sorted(loaded) == sorted(f"e{i}".encode() for i in range(400))
    last = int(client.get("sqe:{load.enriched}:batch") or -1)
    assert last >= 2 and client.keys("sqe:*:stage:*") == []

    # Spark runs the last batch again (its commit log lost): the store holds it, and the
    # sink writes and commits nothing.
    assert hop.checkpoint is not None
    (Path(hop.checkpoint.removeprefix("file:")) / "commits" / str(last)).unlink()
    before = {k: client.hgetall(k) for k in client.keys("*") if not k.startswith(b"sqe:")}
    load()
    assert {k: client.hgetall(k) for k in client.keys("*") if not k.startswith(b"sqe:")} == before
    assert int(client.get("sqe:{load.enriched}:batch")) == last
    assert client.keys("sqe:*:stage:*") == []

    # A second query of the same consumer, on a checkpoint of its own, is refused at its read.
    with pytest.raises(sqe.SqeError, match="has no batch yet, but consumer 'load.enriched' "
                       "has committed batch"):
        load("other")


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.postgres
def test_the_sqe_hop_sink_writes_postgres_and_refuses_what_it_cannot_take(
        spark, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    source, dest = kafka_topic(2, "events"), kafka_topic(2, "out")
    produce_events(kafka_bootstrap, source, 200, partitions=2)
    conf = _options(kafka_bootstrap, redis_url, postgres_dsn, more={
        "jw.sqe.spout.kafka.maxRecordsPerBatch": 80,
        "jw.sqe.spout.fields": {"event_id": "string", "region": "string"}})

    def hop(name: str, state: str) -> sqe.Hop:
        return sqe.Hop(f"sink.{name}", topic=source, checkpoint=tmp_path / name,
                       deserializer="json", conf=conf,
                       into=[sqe.InsertInto(objectName=dest if state == "KAFKA" else name,
                                            stateName=state, fields=["event_id", "region"])])

    table = hop("sink_rows", "POSTGRES")  # its tasks build CSV, the commit copies it
    table.write_stream(table.read(spark)).trigger(availableNow=True).start().awaitTermination()
    with psycopg.connect(postgres_dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT event_id FROM sink_rows").fetchall()]
        batches = conn.execute("SELECT max(batch_id) FROM sqe_batches WHERE consumer = "
                               "'sink.sink_rows'").fetchone()
    assert sorted(ids) == sorted(f"e{i}" for i in range(200)) and batches == (2,)

    console = hop("console", "CONSOLE")
    with pytest.raises(sqe.TopologyError, match="hop sink.console, state console: Console "
                       "state console cannot be written by the sqe-hop sink"):
        console.sink_frame(console.read(spark))
    selected = hop("selected", "KAFKA")
    with pytest.raises(sqe.TopologyError, match="hop sink.selected, state out-.*: a Kafka state "
                       "keys each row by the columns _sqe_pid, _sqe_partition, _sqe_offset "
                       r".*these have no _sqe_partition, _sqe_offset \(keep all three"):
        selected.sink_frame(selected.read(spark).select("event_id", "region", "_sqe_pid"))
    shuffled = hop("shuffled", "KAFKA")
    query = shuffled.write_stream(shuffled.read(spark).repartition(3)).trigger(
        availableNow=True).start()
    with pytest.raises(Exception) as info:
        query.awaitTermination()
    assert ("hop sink.shuffled batch 0: the records of source partition" in str(info.value)
            and "reached a Kafka state from two tasks" in str(info.value))
