"""An HWM store that lost commits the checkpoint counts as done is refused at the next start,
before anything is read (its lost marks would let replays through), until the operator accepts
that loss for the batch the refusal names: a real ``redis-server`` restarted from an older
snapshot (a restart that lost acknowledged writes), and the progress file of the checkpoint as
the witness of what was committed there."""

from __future__ import annotations

import json
import logging
import signal
import time
from typing import Any

import pytest
import redis
import yaml

import sqe
from sqe.cli.local_services import service_conf
from sqe.cli.main import main
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import StoreBehind
from sqe.lang.topology import load_topology
from sqe.observe.batch_report import BatchReport
from sqe.observe.progress import PROGRESS_FILE, ProgressLog, last_report
from sqe.source.read_report import TaskRead, batch_key, range_key
from sqe.wire.keys import StreamMetadata
from support.secured_redis import start_redis
from tests.support.kafka_io import produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

_VOLATILE = ["--save", "", "--appendonly", "no"]


def _events(kafka: str, topic: str, start: int, count: int) -> None:
    produce(kafka, topic, [(StreamMetadata(4242, 0, i).to_bytes(),
                            json.dumps({"event_id": f"e{i}", "region": "EU"}).encode(), 0)
                           for i in range(start, start + count)])


def _write_topology(path, topic: str) -> None:
    """A topology of one stream of ``topic``, replays filtered, to the console."""
    path.write_text(yaml.safe_dump([
        {"CreateStream": {"streamName": "In", "objectName": topic, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True,
                                      "jw.sqe.spout.kafka.startingOffsets": "earliest"}}},
        {"Query": {"insertInto": {"objectName": "log", "stateName": "CONSOLE",
                                  "fields": ["event_id"]},
                   "select": {"expressions": ["event_id"]}, "from": {"objectName": "In"}}}]))


def test_an_hwm_store_restarted_without_its_last_commits_is_refused_until_the_loss_is_accepted(
        spark, kafka_bootstrap, kafka_topic, tmp_path, caplog):
    server, port = start_redis(tmp_path / "redis", _VOLATILE, {})
    topic = kafka_topic(1, "enriched")
    url = f"redis://127.0.0.1:{port}/0"
    path = tmp_path / "behind.yaml"
    _write_topology(path, topic)
    plan = plan_topology(load_topology(path), conf={
        "jw.sqe.spout.kafka.brokers": kafka_bootstrap,
        "jw.sqe.spout.kafka.filterReplays.redis.url": url})
    said = "the store lost the commits"
    try:
        _events(kafka_bootstrap, topic, 0, 4)
        run_topology(plan, spark, "behind", tmp_path / "ck", "once")
        redis.Redis(port=port).save()  # a snapshot after batch 0
        _events(kafka_bootstrap, topic, 4, 4)
        with caplog.at_level(logging.WARNING, logger="sqe"):
            run_topology(plan, spark, "behind", tmp_path / "ck", "once")  # batch 1
        assert said not in caplog.text  # the store holds what the progress file shows
        # the server dies and comes back from the snapshot: batch 1's commit is gone
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        server, _ = start_redis(tmp_path / "redis", _VOLATILE, {}, port=port)
        assert int(redis.Redis(port=port).get("sqe:{behind.In}:batch")) == 0
        _events(kafka_bootstrap, topic, 8, 2)
        progress = tmp_path / "ck" / PROGRESS_FILE
        lost = (f"behind.In: the HWM store at {url} holds batch 0 as its last, but the "
                f"checkpoint's progress file ({progress}) shows batch 1 committed there: the "
                "store lost the commits after batch 0 (a failover to a replica that was behind, "
                "or a restart that lost acknowledged writes)")
        # fails closed: refused before anything is read, naming the way on
        with pytest.raises(StoreBehind) as refused:
            run_topology(plan, spark, "behind", tmp_path / "ck", "once")
        assert str(refused.value).startswith(
            f"{lost}, so replays of the records of batch 1 would pass the replay filter, and "
            "the run stops before reading anything: restore the store from a copy that holds "
            "batch 1"), str(refused.value)
        assert "`the same run with accept_lost_marks=1`" in str(refused.value)
        assert int(redis.Redis(port=port).get("sqe:{behind.In}:batch")) == 0
        assert last_report(progress, lambda r: True).batch_id == 1  # nothing ran
        # a loss accepted for another batch is refused all the same
        with pytest.raises(StoreBehind):
            run_topology(plan, spark, "behind", tmp_path / "ck", "once", accept_lost_marks=0)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sqe"):
            reports = run_topology(plan, spark, "behind", tmp_path / "ck", "once",
                                   accept_lost_marks=1)
        assert f"warning: {lost}; going on without the marks of batch 1 as asked" in caplog.text
        assert int(redis.Redis(port=port).get("sqe:{behind.In}:batch")) == 2
        caplog.clear()
        _events(kafka_bootstrap, topic, 10, 2)
        with caplog.at_level(logging.WARNING, logger="sqe"):  # caught up: nothing to accept
            again = run_topology(plan, spark, "behind", tmp_path / "ck", "once")
        assert said not in caplog.text
    finally:
        server.stop()
    assert [r.batch_id for r in reports] == [2]  # goes on from the checkpoint, as asked
    assert [r.batch_id for r in again] == [3]


def test_the_last_report_is_read_from_the_end_past_an_unfinished_line(tmp_path):
    path = tmp_path / PROGRESS_FILE
    log = ProgressLog(path, "t")
    for b, (stream, filtering) in enumerate([("A", True), ("B", True), ("A", False)] * 1000):
        log.append(BatchReport(stream, b, filtering=filtering))
    with path.open("a") as f:
        f.write('{"format": 1, "run"')  # a crash mid-line
    assert path.stat().st_size > 3 * 65536  # read back in more than one block
    found = last_report(path, lambda r: r.stream == "A" and r.filtering)
    assert found is not None and found.batch_id == 3 * 999
    assert last_report(path, lambda r: r.stream == "C") is None
    assert last_report(tmp_path / "none.jsonl", lambda r: True) is None


def test_a_hops_store_that_lost_its_marks_is_refused_by_sparks_commit_log(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    """A hop of plain PySpark keeps no progress file: Spark's commit log is the witness (a
    batch Spark counts as done was committed to the HWM store first)."""
    topic = kafka_topic(1, "enriched")
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays": True,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
            "jw.sqe.spout.kafka.startingOffsets": "earliest"}

    def run(accept: int | None = None) -> sqe.Hop:
        hop = sqe.Hop("flushed.enriched", topic=topic, checkpoint=tmp_path / "ck", conf=conf,
                      accept_lost_marks=accept)
        (hop.read(spark).writeStream.option("checkpointLocation", hop.checkpoint)
         .trigger(availableNow=True).foreachBatch(hop.exactly_once(lambda rows, batch: None))
         .start().awaitTermination())
        return hop

    client = redis.Redis.from_url(redis_url)
    _events(kafka_bootstrap, topic, 0, 4)
    run()
    _events(kafka_bootstrap, topic, 4, 4)
    run()  # batch 1
    client.delete(*client.keys("sqe:{flushed.enriched}:*"))  # a store restarted empty
    _events(kafka_bootstrap, topic, 0, 4)  # replays of batch 0's records
    with pytest.raises(StoreBehind) as refused:
        run()
    commits = f"{tmp_path / 'ck'}/commits".replace("//", "/")
    assert (f"flushed.enriched: the HWM store at {redis_url} holds no batch, but Spark's "
            f"commit log of the checkpoint (") in str(refused.value)
    assert f"{commits}) shows batch 1 committed there" in str(refused.value)
    assert "`the same run with accept_lost_marks=1`" in str(refused.value)
    assert "`hop.rebuild_marks() before hop.read(spark)`" in str(refused.value)
    assert not client.keys("sqe:{flushed.enriched}:*")  # nothing read, nothing committed
    held = {k: client.dump(k) for k in client.keys("*")}
    hop = run(accept=1)  # going on without the marks, as asked: the replays pass once
    assert [r.records_read for r in hop.reports] == [4]

    # the operator's other way: the marks read back from the topic, then the replays dropped
    client.flushdb()
    for key, value in held.items():
        client.restore(key, 0, value)
    for name in ("offsets", "commits"):  # the checkpoint as the refusal found it
        for file in ("2", ".2.crc"):
            (tmp_path / "ck" / name / file).unlink(missing_ok=True)
    said = sqe.Hop("flushed.enriched", topic=topic, checkpoint=tmp_path / "ck",
                   conf=conf).rebuild_marks()
    assert said.startswith("flushed.enriched: its HWM store holds no batch, the checkpoint's "
                           "last is batch 1"), said
    assert said.endswith("; committed batch 1 with 1 high-water mark(s)"), said
    hop = run()
    assert [(r.records_read, r.replays_dropped) for r in hop.reports] == [(4, 4)]


def test_a_hop_whose_first_batch_failed_on_a_full_disk_starts_again(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    """A checkpoint write that fails on a full disk leaves Spark's temporary file beside the
    offsets file it was writing; with it there, a query that has no batch yet refuses to start
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY).  The hop's start removes it, and says so."""
    topic = kafka_topic(1, "enriched")
    uuid = "0c0ffee0-1111-2222-3333-444455556666"
    left = [tmp_path / "ck" / "offsets" / f".0.{uuid}.tmp",
            tmp_path / "ck" / "offsets" / f"..0.{uuid}.tmp.crc"]
    left[0].parent.mkdir(parents=True)
    for path in left:
        path.write_text("v1")
    _events(kafka_bootstrap, topic, 0, 4)
    hop = sqe.Hop("full.enriched", topic=topic, checkpoint=tmp_path / "ck", conf={
        "jw.sqe.spout.kafka.brokers": kafka_bootstrap, "jw.sqe.spout.kafka.filterReplays": True,
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
        "jw.sqe.spout.kafka.startingOffsets": "earliest"})
    with caplog.at_level(logging.WARNING, logger="sqe"):
        rows = hop.read(spark)
    (rows.writeStream.option("checkpointLocation", hop.checkpoint).trigger(availableNow=True)
     .foreachBatch(hop.exactly_once(lambda batch_rows, batch: None)).start()
     .awaitTermination())  # with the files there: STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY
    assert [r.records_read for r in hop.reports] == [4]
    assert not any(path.exists() for path in left)
    assert "full.enriched: removed 2 temporary file(s) that checkpoint writes which failed" \
        in caplog.text


@pytest.mark.parametrize("way", ["foreachBatch", "sink"])
def test_a_store_that_loses_its_marks_while_a_hop_runs_stops_its_next_batch(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, way):
    """... and once its marks are rebuilt, the batch it stopped runs again and drops the
    replays: the reports its tasks left of the marks they read from the emptied store (none)
    are not taken over the rebuilt ones."""
    topic = kafka_topic(1, "enriched")
    consumer = f"running_{way}.enriched"

    def make() -> sqe.Hop:
        services = dict(pair.split("=", 1)  # the Redis state in the HWM store's database
                        for pair in service_conf(kafka_bootstrap, redis_url)[1::2])
        return sqe.Hop(consumer, topic=topic, checkpoint=tmp_path / "ck", conf={
            **services, "jw.sqe.spout.kafka.filterReplays": True,
            "jw.sqe.spout.kafka.startingOffsets": "earliest"},
            into=[sqe.InsertInto(objectName=f"log_{way}", stateName="REDIS",
                                 fields=["_partition", "_offset", "_value"],
                                 options={"jw.sqe.state.redis.datatype": "HASH",
                                          "jw.sqe.state.redis.keyname.fields": ["_partition"],
                                          "jw.sqe.state.redis.fieldname.fields": ["_offset"]})])

    def writer(hop: sqe.Hop) -> Any:
        rows = hop.read(spark)
        return hop.write_stream(rows) if way == "sink" else (
            rows.writeStream.option("checkpointLocation", hop.checkpoint)
            .foreachBatch(hop.exactly_once(lambda batch_rows, batch: batch.write(
                f"log_{way}", batch_rows))))

    client = redis.Redis.from_url(redis_url)
    _events(kafka_bootstrap, topic, 0, 4)
    query = writer(make()).trigger(processingTime="200 milliseconds").start()
    try:
        deadline = time.monotonic() + 60
        while client.get(f"sqe:{{{consumer}}}:batch") is None:
            assert time.monotonic() < deadline and query.isActive
            time.sleep(0.1)
        client.delete(*client.keys(f"sqe:{{{consumer}}}:*"))  # the store restarted empty
        _events(kafka_bootstrap, topic, 0, 4)  # replays, which its marks would have dropped
        with pytest.raises(StoreBehind) as stopped:  # SQE's class, its sentence first
            sqe.Hop.await_termination(query, 120)
    finally:
        query.stop()
    sentence = str(stopped.value)
    assert sentence.startswith(
        f"{consumer}: the HWM store at {redis_url} holds no batch, but batch 0 was committed "
        "there: the store lost commits while the stream ran"), sentence
    assert "Traceback" not in sentence and "\n" not in sentence
    assert "accept_lost_marks=0" in sentence
    spark_error = stopped.value.__context__  # Spark's own, with its traces
    assert spark_error is not None and stopped.value.__suppress_context__
    # the sentence alone, as a hop's driver says it (in a sink's task: a Python worker's trace)
    assert sqe.Hop.explain(spark_error) == sentence
    assert client.get(f"sqe:{{{consumer}}}:batch") is None  # nothing of the replays committed
    # the sink's tasks read the batch before its writer found the store behind: their reports
    # say the store held no mark ("start": null), and its run again must not filter by them
    assert (len(client.keys(f"sqe:{{{consumer}}}:read:*")) == 1) is (way == "sink")

    said = make().rebuild_marks()
    assert said.endswith("; committed batch 0 with 1 high-water mark(s)"), said
    loaded = {k: client.hgetall(k) for k in client.keys("*") if not k.startswith(b"sqe:")}
    writer(make()).trigger(availableNow=True).start().awaitTermination()
    assert client.get(f"sqe:{{{consumer}}}:batch") == b"1"
    assert {k: client.hgetall(k) for k in client.keys("*")
            if not k.startswith(b"sqe:")} == loaded  # the replays dropped


def test_sqe_hwm_rebuild_reads_the_lost_marks_again_from_the_topic_and_replays_are_dropped(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, capsys):
    topic = kafka_topic(1, "enriched")
    path = tmp_path / "rebuilt.yaml"
    _write_topology(path, topic)
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    plan = plan_topology(load_topology(path), conf=conf)
    client = redis.Redis.from_url(redis_url)
    ck = tmp_path / "ck"
    produce(kafka_bootstrap, topic, [  # another writer's records first: pid 77
        (StreamMetadata(77, 3, i).to_bytes(), json.dumps({"event_id": f"x{i}"}).encode(), 0)
        for i in range(3)])
    _events(kafka_bootstrap, topic, 0, 4)
    run_topology(plan, spark, "rebuilt", ck, "once")
    _events(kafka_bootstrap, topic, 4, 4)
    run_topology(plan, spark, "rebuilt", ck, "once")  # batch 1
    marks = client.hgetall("sqe:{rebuilt.In}:hwm")
    assert marks == {b"4242:0": b"7", b"77:3": b"2"}
    client.delete(*client.keys("sqe:{rebuilt.In}:*"))  # a store restarted empty
    _events(kafka_bootstrap, topic, 4, 4)  # replays of batch 1's records
    _events(kafka_bootstrap, topic, 8, 2)
    with pytest.raises(StoreBehind, match="`sqe hwm rebuild"):
        run_topology(plan, spark, "rebuilt", ck, "once")

    # what the tasks of a batch tried meanwhile report (a hop's, with reportRead): the marks
    # they filtered by, none, as the store held none; a run of that batch again would take
    # them over the store's and pass the replays, so the rebuild deletes them
    tried = range_key("rebuilt.In", topic, 0, 8, 18)
    client.set(tried, TaskRead({(4242, 0): None}, {(4242, 0): 9}, rows=10).dump())
    client.sadd(batch_key("rebuilt.In", "query", 2), tried)
    cli = ["hwm", "rebuild", str(path), "--checkpoint", str(ck),
           *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]]
    capsys.readouterr()
    assert main(cli) == 2  # not at a terminal: asks for --yes
    assert "confirm with --yes" in capsys.readouterr().err
    assert main([*cli, "--yes"]) == 0
    said = capsys.readouterr().out
    assert ("rebuilt.In: its HWM store holds no batch, the checkpoint's last is batch 1 "
            "(ended at offsets") in said
    assert "11 records of" in said and "give 2 high-water mark(s)" in said
    assert "rebuilt.In: committed batch 1 with 2 high-water mark(s)" in said
    assert client.hgetall("sqe:{rebuilt.In}:hwm") == marks
    assert not client.keys("sqe:{rebuilt.In}:read*")
    assert main([*cli, "--yes"]) == 0  # level with the checkpoint: nothing to do
    assert "nothing to rebuild" in capsys.readouterr().out
    reports = run_topology(plan, spark, "rebuilt", ck, "once")
    assert [(r.batch_id, r.replays_dropped, r.records_read) for r in reports] == [(2, 4, 6)]
