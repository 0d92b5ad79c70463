"""SQE's own replay scenario, run end to end: real broker, real Redis, real Spark."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import yaml

from sqe.config.plan import plan_topology
from sqe.engine.batch.learned_types import LEARNED_FILE
from sqe.engine.batch.pipeline import stream_stores
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata, kafka_secondary_id, pid_for
from tests.support import DATA, redis_string_query
from tests.support.kafka_io import cluster_id, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

UPSTREAM_PID = 4242
SEQUENCES = {0: [0, 1, 2, 1, 2, 3, 2, 3, 4], 1: [0, 1, 2, 1, 0, 1, 2, 1, 0],
             2: [0, 1, 2, 3, 4, 3, 2, 1, 0]}


def topology_file(tmp_path: Path, source: str, dest: str) -> Path:
    """SQE's replay test topology with this test's topic names."""
    text = (DATA / "sqe_kafka_replays.json").read_text()
    text = text.replace('"objectName": "source"', f'"objectName": "{source}"')
    text = text.replace('"objectName": "dest"', f'"objectName": "{dest}"')
    path = tmp_path / "replays.json"
    path.write_text(text)
    return path


def test_sqe_replay_scenario(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "source"), kafka_topic(1, "dest")
    keys = [StreamMetadata(UPSTREAM_PID, sp, off).to_bytes()
            for sp, seq in SEQUENCES.items() for off in seq]
    produce(kafka_bootstrap, source, [(k, k, 0) for k in keys])
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    plan = plan_topology(load_topology(topology_file(tmp_path, source, dest)), conf=conf)

    reports = run_topology(plan, spark, "replays", tmp_path / "ck", "once")

    # Expected: per source partition, the offsets above every earlier one, in order.
    expected = []
    for position, key in enumerate(keys):
        m = StreamMetadata.from_bytes(key)
        earlier = [StreamMetadata.from_bytes(k).offset for k in keys[:position]
                   if StreamMetadata.from_bytes(k).partition == m.partition]
        if all(m.offset > e for e in earlier):
            expected.append((position, key))
    assert len(expected) == 13
    pid = pid_for("replays", "Source",
                  kafka_secondary_id(cluster_id(kafka_bootstrap, source), [kafka_bootstrap], source))
    got = read_topic(kafka_bootstrap, dest)
    assert [(r.key, r.value) for r in got] == [
        (StreamMetadata(pid, 0, position).to_bytes(), key) for position, key in expected]
    assert sum(r.records_read for r in reports) == 27
    assert sum(r.replays_dropped for r in reports) == 14
    assert sum(r.written.get(dest, 0) for r in reports) == 13


def _replay_stream(topic: str) -> dict:
    """A CreateStream of JSON records from ``topic`` that drops replays, from the start."""
    return {"CreateStream": {"streamName": "In", "objectName": topic, "spoutName": "KAFKA",
                             "deserializer": "json",
                             "options": {"jw.sqe.spout.kafka.filterReplays": True,
                                         "jw.sqe.spout.kafka.startingOffsets": "earliest"}}}


def _plan(path: Path, commands: list[dict], kafka_bootstrap: str, redis_url: str, **conf: str):
    """The plan of ``commands`` written to ``path``, the Redis states in the HWM store's
    database; ``conf``: more settings."""
    path.write_text(yaml.safe_dump(commands))
    url = urlsplit(redis_url)
    return plan_topology(load_topology(path), conf={
        "jw.sqe.spout.kafka.brokers": kafka_bootstrap,
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
        "jw.sqe.state.redis.host": url.hostname, "jw.sqe.state.redis.port": url.port,
        "jw.sqe.state.redis.database": url.path.strip("/") or 0, **conf})


def _jobs(spark, prefix: str) -> list[tuple[str, int]]:
    """(description, tasks) of the Spark jobs whose description starts with ``prefix``."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        text = job.description().get() if job.description().isDefined() else ""
        if text.startswith(prefix):
            found.append((text, job.numTasks()))
    return found


@pytest.mark.postgres
@pytest.mark.parametrize("learned", [True, False])
def test_a_batch_of_replays_only_commits_everywhere_without_reading_its_rows_again(
        spark, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path, learned):
    topic = kafka_topic(3, "enriched")
    events = [(StreamMetadata(UPSTREAM_PID, i % 3, i // 3).to_bytes(),
               json.dumps({"event_id": f"e{i}", "region": "EU"}).encode(), i % 3)
              for i in range(9)]
    produce(kafka_bootstrap, topic, events)
    table = f"quiet_{tmp_path.name[-12:].replace('-', '_').lower()}"
    commands = [
        _replay_stream(topic),
        {"Query": {"insertInto": {"objectName": "quiet_log", "stateName": "REDIS",
                                  "fields": ["region", "event_id", "at"],
                                  "options": {"jw.sqe.state.redis.datatype": "HASH",
                                              "jw.sqe.state.redis.keyname.fields": ["region"],
                                              "jw.sqe.state.redis.fieldname.fields":
                                                  ["event_id"]}},
                   "select": {"expressions": ["region", "event_id", {"sql": "_offset"}]},
                   "from": {"objectName": "In"}}},
        {"Query": {"insertInto": {"objectName": table, "stateName": "POSTGRES",
                                  "fields": ["event_id", "region"]},
                   "select": {"expressions": ["event_id", "region"]},
                   "from": {"objectName": "In"}}}]
    plan = _plan(tmp_path / "quiet.yaml", commands, kafka_bootstrap, redis_url,
                 **{"jw.sqe.state.postgres.dsn": postgres_dsn})

    name = f"quiet_{'learned' if learned else 'inferred'}"  # its jobs' names are its own
    first = run_topology(plan, spark, name, tmp_path / "ck", "once")
    if not learned:  # the per-batch way, as before a stream's types are learned
        (tmp_path / "ck" / "In" / LEARNED_FILE).unlink()
    produce(kafka_bootstrap, topic, events)  # the same keys again: replays only
    again = run_topology(plan, spark, name, tmp_path / "ck", "once")

    assert [r.written for r in first] == [{"quiet_log": 9, table: 9}]
    [report] = again
    assert (report.records_read, report.replays_dropped) == (9, 9)
    assert report.written == {"quiet_log": 0, table: 0}
    # Every store recorded the batch, as after any other batch.
    stores = stream_stores(plan, name, plan.topology.streams[0])
    assert sorted(c.batch_id for c in stores.committed()) == [1, 1]
    # The batch's rows were read once, and nothing else started a Spark job: planned once
    # with the JSON types the first run learned, each state recorded the batch in that one
    # job; the per-batch way inferred nothing and each state recorded the batch without a
    # job (Sink.write_empty).
    jobs = _jobs(spark, f"sqe {name}.In batch {report.batch_id}: ")
    if learned:
        assert len(jobs) == 1 and ": read, run the queries and write " in jobs[0][0], jobs
    else:
        assert jobs and all(text.endswith("find the new high-water marks")
                            for text, _ in jobs), jobs


def test_the_redis_states_of_a_batch_are_staged_in_one_spark_job(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    topic = kafka_topic(3, "staged")
    events = [(StreamMetadata(UPSTREAM_PID, i % 3, i // 3).to_bytes(),
               json.dumps({"event_id": f"e{i}", "region": "EU" if i % 2 else "US",
                           "n": i}).encode(),
               i % 3) for i in range(9)]
    produce(kafka_bootstrap, topic, events)
    commands = [
        _replay_stream(topic),
        {"Query": {"insertInto": {"stateName": "REDIS", "objectName": "by_region",
                                  "fields": ["region", "event_id", "n"],
                                  "options": {"jw.sqe.state.redis.datatype": "HASH",
                                              "jw.sqe.state.redis.keyname.fields": ["region"],
                                              "jw.sqe.state.redis.fieldname.fields":
                                                  ["event_id"]}},
                   "select": {"expressions": ["region", "event_id", "n"]},
                   "from": {"objectName": "In"}}},
        redis_string_query("last_region", "event_id", "region")]
    plan = _plan(tmp_path / "staged.yaml", commands, kafka_bootstrap, redis_url)

    [report] = run_topology(plan, spark, "staged", tmp_path / "ck", "once")

    assert report.written == {"by_region": 9, "last_region": 9}
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.hgetall("EU") == {f"e{i}".encode(): str(i).encode() for i in range(1, 9, 2)}
        assert client.hgetall("US") == {f"e{i}".encode(): str(i).encode() for i in range(0, 9, 2)}
        assert client.mget([f"e{i}" for i in range(9)]) == [
            b"EU" if i % 2 else b"US" for i in range(9)]
    finally:
        client.close()
    # Both states' rows went to the HWM store's stages in one job, none in a job of its own.
    jobs = [text for text, _ in _jobs(spark, f"sqe staged.In batch {report.batch_id}: ")]
    assert [t for t in jobs if ": stage " in t] == [
        f"sqe staged.In batch {report.batch_id}: stage by_region, last_region"], jobs
    assert not [t for t in jobs if ": write " in t], jobs
