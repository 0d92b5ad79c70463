"""A stream planned once (sqe.engine.batch.one_pass): each batch one Spark job, writing what the
per-batch way writes; a batch that needs the per-batch way goes that way.  Real broker, Redis
and Spark."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
import redis
import yaml

from sqe.config.plan import plan_topology
from sqe.engine.batch.one_pass import ROW, plan_one_pass, state_column, why_not_one_pass
from sqe.engine.batch.pipeline import build_pipelines
from sqe.engine.run.runner import run_topology
from sqe.engine.spark.checkpoint import FILE_MANAGER_SETTING, use_file_system_manager
from sqe.lang.topology import load_topology
from sqe.source.kafka import KafkaSource
from sqe.wire.keys import StreamMetadata
from tests.engine.test_run_replays import _jobs, _plan
from tests.support import redis_string_query
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

UPSTREAM = 4242
TYPES = {"event_id": "string", "region": "string", "amount": "bigint", "day": "string"}


def _events(n: int) -> list[tuple[bytes, bytes, int]]:
    """``n`` events over 3 upstream partitions, each partition's offsets 0, 1, ...; the
    fifth event's day does not parse."""
    return [(StreamMetadata(UPSTREAM, i % 3, i // 3).to_bytes(),
             json.dumps({"event_id": f"e{i}", "region": ["eu", "us", "apac"][i % 3],
                         "amount": i, "day": "someday" if i == 4 else f"2024-05-{1 + i % 28:02d}",
                         "extra": {"nested": i}}).encode(), i % 3) for i in range(n)]


def _commands(source: str, out: str, types: dict | None, **stream: object) -> list[dict]:
    """Two Redis states and a Kafka state with a filter value over one replay-filtered stream
    (``types``: its declared fields; None: inferred in every batch)."""
    options: dict = {"jw.sqe.spout.kafka.filterReplays": True,
                     "jw.sqe.spout.kafka.startingOffsets": "earliest", **stream}
    if types is not None:
        options["jw.sqe.spout.fields"] = types
    return [
        {"CreateStream": {"streamName": "In", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "json", "options": options}},
        {"Query": {"insertInto": {"objectName": "by_region", "stateName": "REDIS",
                                  "fields": ["region", "event_id", "cents"],
                                  "options": {"jw.sqe.state.redis.datatype": "HASH",
                                              "jw.sqe.state.redis.keyname.fields": ["region"],
                                              "jw.sqe.state.redis.fieldname.fields":
                                                  ["event_id"]}},
                   "select": {"expressions": ["region", "event_id", {"*": ["amount", 100]}]},
                   "from": {"objectName": "In"}}},
        {"Query": {"insertInto": {"objectName": out, "stateName": "KAFKA",
                                  "fields": ["event_id", "region", "day"],
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                              "jw.sqe.state.kafka.filterValue": "region"}},
                   "select": {"expressions": [
                       "event_id", {"sql": "upper(region)"},
                       {"FormatDate": [{"ParseDate": ["day", {"C": "yyyy-MM-dd"}]},
                                       {"C": "dd.MM.yyyy"}]}]},
                   "from": {"objectName": "In"},
                   "where": {">": ["amount", 1]}}},
        redis_string_query("last", "event_id", "region")]


def _conf(kafka_bootstrap: str) -> dict[str, str]:
    return {"jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.maxRecordsPerBatch": "12"}


def _store(redis_url: str) -> dict[bytes, object]:
    """The states' keys in Redis (SQE's own keys left out)."""
    client = redis.Redis.from_url(redis_url)
    try:
        out: dict[bytes, object] = {}
        for key in client.keys("*"):
            if key.startswith(b"sqe:"):
                continue
            out[key] = client.hgetall(key) if client.type(key) == b"hash" else client.get(key)
        return out
    finally:
        client.close()


def _flush(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def _written(kafka_bootstrap: str, topic: str) -> set[tuple[int, int, bytes | None]]:
    """(source partition, source offset, value) of each record of ``topic``: replays of a
    retried attempt are the same triple."""
    out = set()
    for r in read_topic(kafka_bootstrap, topic):
        assert r.key is not None
        m = StreamMetadata.from_bytes(r.key)
        out.add((m.partition, m.offset, r.value))
    return out


def fresh_way(way: str, source: str, types: dict | None, kafka_bootstrap: str, kafka_topic,
              redis_url: str, tmp_path) -> tuple:
    """An empty Redis, and (plan, its stream's pipeline, its Kafka state's new topic) of
    :func:`_commands` over ``source`` as topology ``way``."""
    _flush(redis_url)
    out = kafka_topic(3, f"out_{way}")
    plan = _plan(tmp_path / f"{way}.yaml", _commands(source, out, types), kafka_bootstrap,
                 redis_url, **_conf(kafka_bootstrap))
    [p] = build_pipelines(plan, way)
    return plan, p, out


def test_one_pass_writes_what_the_per_batch_way_writes_in_one_job_a_batch(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    source = kafka_topic(3, "src")
    events = _events(30)
    # the events, then the first 12 again (replays an upstream retry wrote), then 6 more
    produce(kafka_bootstrap, source, events[:24] + events[:12] + _events(36)[30:])
    results = {}
    for way, types in (("once", TYPES), ("each", None)):
        plan, p, out = fresh_way(way, source, types, kafka_bootstrap, kafka_topic, redis_url,
                                 tmp_path)
        assert (why_not_one_pass(p) is None) == (types is not None)
        assert p.source is not None  # its workers make the Kafka state's producer ahead
        [(role, conf)] = p.source.producers_ahead.items()
        assert role == f"Kafka state {out}" and conf["bootstrap.servers"] == kafka_bootstrap
        with caplog.at_level(logging.DEBUG, logger="sqe"):
            reports = run_topology(plan, spark, way, tmp_path / f"ck_{way}", "once")
        results[way] = (reports, _store(redis_url), _written(kafka_bootstrap, out))
        if way == "once":
            assert f"{way}.In: planned once; each batch is one Spark job" in caplog.text
            assert "its one pass failed" not in caplog.text
            for r in reports:  # one job a batch: read, queries and every state
                jobs = [text for text, _ in _jobs(spark, f"sqe {way}.In batch {r.batch_id}: ")]
                assert len(jobs) == 1 and ": read, run the queries and write " in jobs[0], jobs

    (once, once_store, once_out), (each, each_store, each_out) = results["once"], results["each"]
    assert once_store == each_store
    assert len(once_store[b"eu"]) == 10 and once_store[b"e4"] == b"us"  # events 24-29 never came
    assert once_out == each_out
    assert len(once_out) == 30 - 2  # amount > 1
    [e4] = [v for _, _, v in once_out if v is not None and b'"e4"' in v]
    assert b'"day"' not in e4  # its day did not parse: NULL, left out of the JSON

    def counts(reports: list) -> tuple:
        return (sum(r.records_read for r in reports), sum(r.replays_dropped for r in reports),
                sorted(sum(r.written.get(n, 0) for r in reports) for n in reports[0].written),
                sum(r.warnings.get("unparseable_dates", 0) for r in reports))

    assert counts(once) == counts(each)
    assert counts(once)[:2] == (42, 12)
    assert counts(once)[3] == 1


def test_a_value_that_is_not_json_sends_its_batch_the_per_batch_way(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dead = kafka_topic(3, "src"), kafka_topic(1, "dead")
    events = _events(9)
    events[5] = (events[5][0], b"not json", events[5][2])
    produce(kafka_bootstrap, source, events)
    out = kafka_topic(3, "out")
    plan = _plan(tmp_path / "bad.yaml", _commands(
        source, out, TYPES, **{"jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
                               "jw.sqe.spout.kafka.deadLetterTopic": dead}),
                 kafka_bootstrap, redis_url, **_conf(kafka_bootstrap))

    [report] = run_topology(plan, spark, "bad", tmp_path / "ck", "once")

    assert report.source.dead_letters == 1
    assert report.written == {"by_region": 8, out: 6, "last": 8}
    [letter] = read_topic(kafka_bootstrap, dead)
    assert letter.value == b"not json"
    store = _store(redis_url)
    assert b"e5" not in store and store[b"e4"] == b"us"
    assert {o for _, o, _ in _written(kafka_bootstrap, out)} == {0, 1, 2}
    assert len(_written(kafka_bootstrap, out)) == 6


def test_a_row_that_fails_a_query_at_run_time_is_found_the_per_batch_way(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    source, dead = kafka_topic(3, "src"), kafka_topic(1, "dead")
    produce(kafka_bootstrap, source, _events(9))
    out = kafka_topic(3, "out")
    commands = _commands(source, out, TYPES, **{
        "jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
        "jw.sqe.spout.kafka.deadLetterTopic": dead})
    commands[3]["Query"]["select"]["expressions"][1] = {
        "sql": "if(amount = 7, raise_error('seven'), region)"}
    plan = _plan(tmp_path / "fails.yaml", commands, kafka_bootstrap, redis_url,
                 **_conf(kafka_bootstrap))

    with caplog.at_level(logging.WARNING, logger="sqe"):
        [report] = run_topology(plan, spark, "fails", tmp_path / "ck", "once")

    assert "batch 0: its one pass failed (" in caplog.text and "seven" in caplog.text
    assert report.source.dead_letters == 1
    assert report.written["last"] == 8 and report.written["by_region"] == 8
    store = _store(redis_url)
    assert b"e7" not in store and b"e7" not in store[b"us"]  # type: ignore[operator]


def test_a_record_is_one_row_however_many_queries_read_it(spark, kafka_bootstrap, kafka_topic,
                                                         redis_url, tmp_path):
    """The one pass hands the tasks one row per record (beside the source's tally rows): each
    state's columns are NULL in the rows its query drops; two queries may make a field of one
    name with two types (``cents``: a bigint in one, a string in the other)."""
    source = kafka_topic(3, "src")
    produce(kafka_bootstrap, source, _events(9))
    commands = _commands(source, "out", TYPES)
    commands.append({"Query": {
        "insertInto": {"objectName": "cents_text", "stateName": "REDIS",
                       "fields": ["event_id", "cents"],
                       "options": {"jw.sqe.state.redis.keyname.fields": ["event_id"]}},
        "select": {"expressions": ["event_id", {"sql": "cast(amount * 100 AS STRING)"}]},
        "from": {"objectName": "In"}}})
    (p,) = build_pipelines(_plan(tmp_path / "t.yaml", commands, kafka_bootstrap, redis_url,
                                 **_conf(kafka_bootstrap)), "rows")
    spark.dataSource.register(KafkaSource)
    moved = p.starting_at(json.dumps({"0": 0, "1": 0, "2": 0}), "the test").source
    assert moved is not None
    frame = spark.read.format(KafkaSource.name()).options(**replace(
        moved, ending=json.dumps({"0": 3, "1": 3, "2": 3})).to_options()).load()
    plan = plan_one_pass(p, frame, None)
    assert not isinstance(plan, str), plan
    assert plan.frame.columns == [ROW]
    # planned over its own optimized plan: the optimizer that runs at every batch finds
    # nothing to change in it (sqe.engine.spark.spark_api.optimized_once)
    analyzed = plan.frame._jdf.queryExecution().analyzed()
    again = spark._jsparkSession.sessionState().optimizer().execute(analyzed)
    assert again.toString() == analyzed.toString()
    every = plan.frame.select(f"{ROW}.*").collect()
    rows = [r for r in every if r["_sqe_raw_offset"] is not None]
    assert len(rows) == 9 and len(every) - len(rows) <= 3  # at most a tally row a partition
    kept = {i: sum(r[state_column(i)] is not None for r in rows) for i, _ in plan.states}
    assert kept == {0: 9, 1: 7, 2: 9, 3: 9}  # query 1 keeps amount > 1


def test_what_cannot_be_planned_once_says_why(kafka_bootstrap, tmp_path):
    def why(commands: list[dict]) -> str | None:
        path = tmp_path / "t.yaml"
        path.write_text(yaml.safe_dump(commands))
        plan = plan_topology(load_topology(path), conf={
            "jw.sqe.spout.kafka.brokers": kafka_bootstrap, "jw.sqe.pid": "7",
            "jw.sqe.state.kafka.brokers": kafka_bootstrap})
        return why_not_one_pass(build_pipelines(plan, "t")[0])

    base = _commands("src", "out", TYPES)
    assert why(base) is None
    inferred = _commands("src", "out", None)
    assert "infers its JSON fields' types in every batch" in str(why(inferred))
    untyped = _commands("src", "out", {**TYPES, "day": None})
    assert "declare them with types in jw.sqe.spout.fields" in str(why(untyped))
    aggregating = [*base[:1], {"Query": {
        "insertInto": {"objectName": "sums", "stateName": "REDIS", "fields": ["region", "n"],
                       "options": {"jw.sqe.state.redis.keyname.fields": ["region"]}},
        "select": {"expressions": ["region", {"Sum": ["amount"]}]},
        "from": {"objectName": "In"}}}]
    assert str(why(aggregating)).endswith("aggregates")
    chained = [*base[:1], {"Query": {"insertInto": {"objectName": "Mid",
                                                    "fields": ["region", "amount"]},
                                     "select": {"expressions": ["region", "amount"]},
                                     "from": {"objectName": "In"}}},
               {"Query": {"insertInto": {"objectName": "c", "stateName": "CONSOLE",
                                         "fields": ["region"]},
                          "select": {"expressions": ["region"]},
                          "from": {"objectName": "Mid"}}}]
    assert "feeds an intermediate stream" in str(why(chained))


def test_a_local_checkpoint_is_written_through_hadoops_file_system(spark, tmp_path):
    spark.conf.unset(FILE_MANAGER_SETTING)
    try:
        assert use_file_system_manager(spark, "hdfs://nn/ck") is None
        assert spark.conf.get(FILE_MANAGER_SETTING, None) is None
        name = use_file_system_manager(spark, str(tmp_path / "ck"))
        # SQE's own (a FileSystem manager without chmod: test_checkpoint_manager.py), on a
        # local session's class path
        assert name == "sqe.spark.LocalCheckpointFileManager"
        assert spark.conf.get(FILE_MANAGER_SETTING) == name
        spark.conf.set(FILE_MANAGER_SETTING, "my.Manager")  # the user's choice stays
        assert use_file_system_manager(spark, str(tmp_path / "ck")) is None
        assert spark.conf.get(FILE_MANAGER_SETTING) == "my.Manager"
    finally:
        spark.conf.unset(FILE_MANAGER_SETTING)


@pytest.mark.postgres
def test_a_postgres_state_is_written_in_one_pass_and_a_row_it_cannot_hold_is_judged(
        spark, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    import psycopg

    source, dead = kafka_topic(3, "src"), kafka_topic(1, "dead")
    events = _events(9)
    nul = json.loads(events[6][1])
    nul["region"] = "e\u0000u"
    events[6] = (events[6][0], json.dumps(nul).encode(), events[6][2])
    produce(kafka_bootstrap, source, events)
    table = f"one_{tmp_path.name[-12:].replace('-', '_').lower()}"
    commands = _commands(source, kafka_topic(3, "out"), TYPES, **{
        "jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
        "jw.sqe.spout.kafka.deadLetterTopic": dead})[:2]
    commands.append({"Query": {"insertInto": {"objectName": table, "stateName": "POSTGRES",
                                              "fields": ["event_id", "region", "amount"]},
                               "select": {"expressions": ["event_id", "region", "amount"]},
                               "from": {"objectName": "In"}}})
    plan = _plan(tmp_path / "pg.yaml", commands, kafka_bootstrap, redis_url,
                 **{"jw.sqe.state.postgres.dsn": postgres_dsn, **_conf(kafka_bootstrap)})
    [p] = build_pipelines(plan, "pg")
    assert why_not_one_pass(p) is None

    [first] = run_topology(plan, spark, "pg", tmp_path / "ck", "once")  # the NUL: judged
    produce(kafka_bootstrap, source, events[:3] + _events(12)[9:])  # replays, then 3 new
    [second] = run_topology(plan, spark, "pg", tmp_path / "ck", "once")  # in one pass

    assert first.source.dead_letters == 1 and first.written[table] == 8
    assert (second.records_read, second.replays_dropped, second.written[table]) == (6, 3, 3)
    jobs = [t for t, _ in _jobs(spark, f"sqe pg.In batch {second.batch_id}: ")]
    assert len(jobs) == 1 and "Postgres state" in jobs[0], jobs
    with psycopg.connect(postgres_dsn) as conn:
        got = conn.execute(f"SELECT event_id, region, amount FROM {table} ORDER BY amount"
                           ).fetchall()
        batches = conn.execute("SELECT batch_id FROM sqe_batches WHERE consumer = 'pg.In' "
                               "AND target = %s", (table,)).fetchall()
    assert got == [(f"e{i}", ["eu", "us", "apac"][i % 3], i) for i in range(12) if i != 6]
    assert batches == [(second.batch_id,)]


def test_the_checkpoint_keeps_where_batch_0_started_so_any_batch_can_be_read_again(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    from sqe.engine.spark.checkpoint import StreamCheckpoint

    source = kafka_topic(3, "src")
    produce(kafka_bootstrap, source, _events(6))
    commands = _commands(source, kafka_topic(3, "out"), TYPES,
                         **{"jw.sqe.spout.kafka.startingOffsets": "latest"})
    plan = _plan(tmp_path / "pin.yaml", commands, kafka_bootstrap, redis_url,
                 **_conf(kafka_bootstrap))
    [first] = run_topology(plan, spark, "pin", tmp_path / "ck", "once")
    ck = StreamCheckpoint(spark, str(tmp_path / "ck" / "In"))
    assert first.records_read == 0  # latest, when the run began: 2 in each partition
    assert json.loads(ck.start_offsets() or "") == {"0": 2, "1": 2, "2": 2}
    produce(kafka_bootstrap, source, _events(9)[6:])
    [second] = run_topology(plan, spark, "pin", tmp_path / "ck", "once")
    assert second.records_read == 3
    assert [json.loads(o) for o in ck.batch_range(0) or ()] == [{"0": 2, "1": 2, "2": 2}] * 2
    assert [json.loads(o) for o in ck.batch_range(1) or ()] == [{"0": 2, "1": 2, "2": 2},
                                                                 {"0": 3, "1": 3, "2": 3}]
