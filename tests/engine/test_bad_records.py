"""One bad record among good ones, through sqe run: a located sentence, or a dead letter and
every good record exactly once (badRecordPolicy), against the real broker, Redis and Postgres.

Each case first runs with the default policy ``fail`` (the run stops naming the record;
nothing is committed), then again on the same checkpoint with ``deadletter`` (the record
goes to the dead-letter topic unchanged, every good record arrives once, and a further run
adds nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
import redis
import yaml

from sqe.clients.kafka import read_all
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import SqeError
from sqe.lang.topology import load_topology
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 777


def _write(tmp_path: Path, source: str, *queries: dict) -> Path:
    commands = [
        {"CreateStream": {"streamName": "In", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
        *[{"Query": {**query, "from": {"objectName": "In"}}} for query in queries],
    ]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return path


def _run(spark, path: Path, tmp_path: Path, kafka: str, redis_url: str, **conf):
    plan = plan_topology(load_topology(path), conf={
        "jw.sqe.spout.kafka.brokers": kafka, "jw.sqe.state.kafka.brokers": kafka,
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url, **conf})
    return run_topology(plan, spark, "bad", tmp_path / "ck", "once")


def _records(n: int, bad_at: int, bad_value: bytes | None = None, bad_key: bytes | None = None):
    out = []
    for o in range(n):
        key = StreamMetadata(PID, 0, o).to_bytes()
        value = json.dumps({"id": f"r{o}", "word": f"w{o}", "n": str(o)}).encode()
        if o == bad_at:
            key, value = bad_key or key, bad_value or value
        out.append((key, value, 0))
    return out


def _ids_to(dest: str) -> dict:
    """A query writing each record's id to topic ``dest`` (one field: the value as it is)."""
    return {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": ["id"],
                           "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
            "select": {"expressions": ["id"]}}


def _all_good_once(kafka: str, dest: str) -> None:
    ids = [r.value.decode() for r in read_topic(kafka, dest)]
    assert sorted(ids) == sorted(f"r{o}" for o in range(401) if o != 200)


def _fail_then_deadletter(spark, tmp_path, kafka, redis_url, path, source, expect, **conf):
    """The run fails naming record 200; with deadletter it goes on; a third run adds nothing.
    Returns the dead letters."""
    with pytest.raises(SqeError) as failed:
        _run(spark, path, tmp_path, kafka, redis_url, **conf)
    text = str(failed.value)
    assert f"bad record at {source}/0 offset 200" in text, text
    assert expect in text and "badRecordPolicy: deadletter" in text, text
    assert "\n" not in text.strip()
    dead = f"{source}-dead"
    conf = {**conf, "jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
            "jw.sqe.spout.kafka.deadLetterTopic": dead}
    (report,) = _run(spark, path, tmp_path, kafka, redis_url, **conf)
    assert report.source.dead_letters == 1
    assert _run(spark, path, tmp_path, kafka, redis_url, **conf) == []  # nothing new
    letters = list(read_all(kafka, dead))
    assert len(letters) == 1
    headers = dict(letters[0].headers())
    assert headers[DEAD_LETTER_SOURCE] == f"{source}/0/200".encode()
    assert expect.encode() in headers[DEAD_LETTER_REASON]
    return letters


@pytest.mark.postgres
def test_a_nul_character_postgres_cannot_hold(spark, kafka_bootstrap, kafka_topic, redis_url,
                                              postgres_dsn, tmp_path):
    source = kafka_topic(1, "in")
    nul = json.dumps({"id": "r200", "word": "a\u0000b", "n": "200"}).encode()
    produce(kafka_bootstrap, source, _records(401, 200, nul))
    table = f"words_{source.replace('-', '_')}"
    path = _write(tmp_path, source, {
        "insertInto": {"objectName": table, "stateName": "POSTGRES", "fields": ["id", "word"]},
        "select": {"expressions": ["id", "word"]}})
    letters = _fail_then_deadletter(
        spark, tmp_path, kafka_bootstrap, redis_url, path, source,
        "field word holds the NUL character (\\u0000), which Postgres text cannot hold",
        **{"jw.sqe.state.postgres.dsn": postgres_dsn})
    assert letters[0].value() == nul and letters[0].key() == StreamMetadata(PID, 0, 200).to_bytes()
    with psycopg.connect(postgres_dsn) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT id FROM {table}")]
    assert sorted(ids) == sorted(f"r{o}" for o in range(401) if o != 200)


def test_a_value_a_query_cannot_cast(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    """The second query cannot cast record 200; with deadletter, the first query (which could)
    does not write it either: every query is computed before any state is written."""
    source, ids, dest = kafka_topic(1, "in"), kafka_topic(1, "ids"), kafka_topic(1, "out")
    bad = json.dumps({"id": "r200", "word": "w200", "n": "abc"}).encode()
    produce(kafka_bootstrap, source, _records(401, 200, bad))
    path = _write(tmp_path, source, _ids_to(ids), {
        "insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": ["id", "n"],
                       "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
        "select": {"expressions": ["id", {"sql": "cast(n as int) + 1"}]}})
    _fail_then_deadletter(spark, tmp_path, kafka_bootstrap, redis_url, path, source,
                          "command 3 (Query): [CAST_INVALID_INPUT] The value 'abc' of the type "
                          "\"STRING\" cannot be cast to \"INT\"")
    out = [json.loads(r.value) for r in read_topic(kafka_bootstrap, dest)]
    assert sorted((v["id"], v["n"]) for v in out) == sorted(
        (f"r{o}", o + 1) for o in range(401) if o != 200)
    written = [r.value.decode() for r in read_topic(kafka_bootstrap, ids)]
    assert "r200" not in written[401:]  # the fail run may have written it: a replay
    assert sorted(set(written)) == sorted(f"r{o}" for o in range(401))


def test_a_value_that_is_not_json(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    produce(kafka_bootstrap, source, _records(401, 200, b"\xff not json"))
    path = _write(tmp_path, source, _ids_to(dest))
    letters = _fail_then_deadletter(spark, tmp_path, kafka_bootstrap, redis_url, path, source,
                                    "the value is not a JSON object")
    assert letters[0].value() == b"\xff not json"
    _all_good_once(kafka_bootstrap, dest)


def test_a_forged_key_never_drops_the_good_records_after_it(spark, kafka_bootstrap, kafka_topic,
                                                            redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    forged = StreamMetadata(PID, 0, 2**63 - 1).to_bytes()
    produce(kafka_bootstrap, source, _records(401, 200, bad_key=forged))
    path = _write(tmp_path, source, _ids_to(dest))
    letters = _fail_then_deadletter(spark, tmp_path, kafka_bootstrap, redis_url, path, source,
                                    "claims source offset 9223372036854775807")
    assert letters[0].key() == forged
    _all_good_once(kafka_bootstrap, dest)
    marks = redis.Redis.from_url(redis_url).hgetall("sqe:{bad.In}:hwm")
    assert marks == {f"{PID}:0".encode(): b"400"}
