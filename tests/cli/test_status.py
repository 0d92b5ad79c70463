"""sqe status: backlog per partition, high-water marks with age and TTL, stores, last batches."""

from __future__ import annotations

import json
import os

import pytest

from sqe.cli.local_services import free_port
from sqe.cli.main import main
from sqe.config.plan import plan_topology
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.run.runner import run_topology
from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import filtered_copy, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 9191


def _key(offset: int, partition: int) -> bytes:
    return StreamMetadata(PID, partition, offset).to_bytes()


@pytest.fixture
def ran(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    """A topology that ran once over 300 records (and 10 replays), then got 25 more."""
    source, dest = kafka_topic(2, "in"), kafka_topic(2, "out")
    path = filtered_copy(tmp_path / "watched.yaml", source, dest, 200)
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    records = [(_key(o, p), b"%d" % o, p) for p in (0, 1) for o in range(150)]
    produce(kafka_bootstrap, source, records + [(_key(o, 0), b"again", 0) for o in range(10)])
    ck = tmp_path / "ck"
    run_topology(plan_topology(load_topology(path), conf=conf), spark, "watched", ck, "once")
    produce(kafka_bootstrap, source, [(_key(150 + o, 1), b"late", 1) for o in range(25)])
    args = [str(path), "--checkpoint", str(ck)]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    return {"args": args, "source": source, "dest": dest, "ck": ck, "redis": redis_url}


def test_status_shows_backlog_marks_stores_and_last_batches(ran, capsys):
    assert main(["status", *ran["args"]]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"topology watched ({ran['args'][0]}), checkpoint {ran['ck']}: no run " \
        "holds it now"
    assert f"stream In, consumer watched.In, topic {ran['source']} on " in out
    assert "  checkpoint: batch 1 committed" in lines
    rows = [line.split() for line in lines if line.startswith("    ") and
            line.split()[0] in ("0", "1") and len(line.split()) == 4]
    assert rows == [["0", "160", "160", "0"], ["1", "175", "150", "25"]]
    assert "  backlog: 25 records" in lines
    assert f"  high-water marks in the HWM store at {ran['redis']} (TTL 172800 s): 2 live, " \
        "the 2 updated last:" in lines
    marks = [line.split() for line in lines if line.strip().startswith(str(PID))]
    assert sorted((m[1], m[2]) for m in marks) == [("0", "149"), ("1", "149")]
    assert all(m[-2:] == ["48", "h"] or m[-4:-2] == ["47", "h"] for m in marks)  # TTL left
    assert any(line.strip().startswith(f"HWM store at {ran['redis']}: batch 1, ended at offsets")
               for line in lines)
    assert any(f"Kafka state {ran['dest']} (Kafka at " in line and "keeps no record" in line
               for line in lines)
    batches = [line for line in lines if "records read" in line]
    assert len(batches) == 2 and "10 replays dropped" in out


def test_status_as_json_for_scripts(ran, capsys):
    assert main(["status", *ran["args"], "--json", "--marks", "1", "--batches", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    (stream,) = data["streams"]
    assert stream["backlog"] == 25
    assert [(p["partition"], p["end_offset"], p["committed_offset"], p["backlog"])
            for p in stream["partitions"]] == [(0, 160, 160, 0), (1, 175, 150, 25)]
    assert stream["marks_live"] == 2 and len(stream["marks"]) == 1
    (mark,) = stream["marks"]
    assert mark["pid"] == PID and 0 <= mark["age_seconds"] < 600
    assert 172800 - 600 < mark["ttl_left_seconds"] <= 172800
    assert len(stream["last_batches"]) == 1 and stream["last_batches"][0]["batch_id"] == 1
    assert stream["problems"] == [] and data["running"] is None


def test_status_says_which_run_holds_the_checkpoint(ran, capsys):
    lock = CheckpointLock(CheckpointFiles(None, str(ran["ck"])))
    lock.acquire()
    try:
        assert main(["status", *ran["args"]]) == 0
    finally:
        lock.release()
    first = capsys.readouterr().out.splitlines()[0]
    assert f": running, PID {os.getpid()} on " in first and "last heartbeat" in first


def test_a_store_away_is_said_in_its_place_and_the_rest_is_shown(ran, capsys):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    args = [a.replace(ran["redis"], dead) for a in ran["args"]]
    assert main(["status", *args]) == 1
    out = capsys.readouterr().out
    assert "  backlog: 25 records" in out  # from the checkpoint and the brokers
    (problem,) = [line for line in out.splitlines() if "cannot tell" in line]
    assert problem.startswith(f"  cannot tell: the HWM store of watched.In: Redis at {dead}: ")
    assert "Connection refused" in problem
