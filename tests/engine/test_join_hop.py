"""A stream-stream join in a hop (examples/ad_clicks.py): two hops read by one query, each
consumer's marks taken from what its source read, committed one after the other with one batch
id, through replays on both sides and a driver that dies between the two commits."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

import sqe
from sqe.cli.local_services import service_conf
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from sqe.ledger.hwm import HwmStore
from sqe.wire.keys import StreamMetadata
from tests.engine.test_hop import _options
from tests.engine.test_stateful_hop import _next_hop
from tests.support import ROOT
from tests.support.kafka_io import produce, read_topic

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
REGIONS = ("eu", "us", "apac")
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]


def _ad_clicks() -> Any:
    """examples/ad_clicks.py, imported as its directory's scripts import each other."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(ROOT / "examples"))
    return importlib.import_module("ad_clicks")


def _shown(i: int) -> datetime:
    return START + timedelta(seconds=2 * i)


def _impressions(ids: range) -> list[tuple[bytes, bytes, int]]:
    """Impressions ``ids`` as an upstream hop writes them: keyed by (pid 7, partition, offset)."""
    return [(StreamMetadata(7, i % 2, i // 2).to_bytes(),
             json.dumps({"imp_id": f"i{i}", "region": REGIONS[i % 3],
                         "ts": _shown(i).isoformat()}).encode(), i % 2) for i in ids]


def _clicks(ids: range) -> list[tuple[bytes, bytes, int]]:
    """The clicks on impressions ``ids`` (none on every fourth), a few seconds after each."""
    return [(StreamMetadata(8, i % 2, i // 2).to_bytes(),
             json.dumps({"imp_id": f"i{i}", "cents": 10 * (i % 7 + 1),
                         "ts": (_shown(i) + timedelta(seconds=i % 5 + 1)).isoformat()}).encode(),
             i % 2) for i in ids if i % 4]


def _matches(ids: range) -> dict[str, tuple[str, int]]:
    """Each clicked impression: its region and cents."""
    return {f"i{i}": (REGIONS[i % 3], 10 * (i % 7 + 1)) for i in ids if i % 4}


@pytest.fixture
def topics(kafka_topic) -> argparse.Namespace:
    """The example's three topics, new, of two partitions each."""
    return argparse.Namespace(impressions=kafka_topic(2, "impressions"),
                              clicks=kafka_topic(2, "clicks"), clicked=kafka_topic(2, "clicked"))


def _command(t: argparse.Namespace, checkpoint: Path, kafka: str, redis_url: str,
             *extra: str) -> list[str]:
    """examples/ad_clicks.py on topics ``t`` and these services, reading what is there."""
    return [sys.executable, str(ROOT / "examples/ad_clicks.py"), "--once",
            "--impressions", t.impressions, "--clicks", t.clicks, "--clicked", t.clicked,
            "--checkpoint", str(checkpoint), "--config", str(ROOT / "conf/local.yaml"),
            *service_conf(kafka, redis_url, None), *extra]


@pytest.mark.parametrize("way", ["foreachBatch", "sink"])
def test_a_stream_stream_join_of_two_hops_is_exactly_once_through_replays_and_a_crash_between_commits(
        spark, kafka_bootstrap, topics, redis_url, tmp_path, way):
    impressions, clicks, out = topics.impressions, topics.clicks, topics.clicked
    example = _ad_clicks()
    args = argparse.Namespace(**vars(topics), checkpoint=str(tmp_path / "ck"), config=[],
                              once=True, rebuild_marks=False,
                              sink=way == "sink",
                              conf=_options(kafka_bootstrap, redis_url))
    client = redis.Redis.from_url(redis_url)
    client.delete(*REGIONS)
    consumers = ("clicked.impressions", "clicked.clicks")

    def run() -> sqe.Hop:
        return example.clicked(spark, args)

    def exact(ids: range) -> None:
        want = _matches(ids)
        records = read_topic(kafka_bootstrap, out)
        got = [json.loads(r.value)["imp_id"] for r in records]
        assert sorted(got) == sorted(want)  # each match once: no replay joined twice
        assert all(0 < json.loads(r.value)["delay_s"] <= 5 for r in records)
        held = {(region.decode(), k.decode()): int(v) for region in map(str.encode, REGIONS)
                for k, v in client.hgetall(region).items()}
        assert held == {(region, imp): cents for imp, (region, cents) in want.items()}

    def last_batch() -> int:
        commits = Path(args.checkpoint) / "clicked" / "commits"
        return max(int(f.name) for f in commits.iterdir() if f.name.isdigit())

    def committed(consumer: str) -> int | None:
        store = HwmStore.from_url(redis_url, consumer, 3600)
        try:
            last = store.last_commit()
            return last.batch_id if last else None
        finally:
            store.client.close()

    produce(kafka_bootstrap, impressions, _impressions(range(0, 150)))
    produce(kafka_bootstrap, clicks, _clicks(range(0, 150)))
    hop = run()
    exact(range(0, 150))
    if way == "sink":  # its reports are logged where Spark commits (hop.reports: foreachBatch)
        assert not hop.reports
    assert committed(consumers[0]) == committed(consumers[1]) == last_batch()
    if way == "foreachBatch":
        assert sum(r.records_read for r in hop.reports) == 150 + len(_clicks(range(0, 150)))

    # replays on both sides (upstream batches run again), inside the watermark, and new events
    copies = _impressions(range(130, 150)) + _clicks(range(120, 150))
    produce(kafka_bootstrap, impressions, _impressions(range(130, 150)) + _impressions(
        range(150, 300)))
    produce(kafka_bootstrap, clicks, _clicks(range(120, 150)) + _clicks(range(150, 300)))
    hop = run()
    if way == "foreachBatch":
        assert sum(r.replays_dropped for r in hop.reports) == len(copies)
    exact(range(0, 300))
    assert committed(consumers[0]) == committed(consumers[1]) == last_batch()

    # The driver dies between the two commits: the impressions' stores hold the batch, the
    # clicks' HWM store does not, and Spark's commit file of it is missing.  Spark runs the
    # batch again: the impressions hop writes nothing, the clicks hop commits its marks.  (No
    # batch without data after it, which would commit the same marks again.)
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        produce(kafka_bootstrap, impressions, _impressions(range(300, 450)))
        produce(kafka_bootstrap, clicks, _clicks(range(300, 450)))
        before = committed(consumers[1])
        marks = [k for k in client.keys("sqe:{clicked.clicks}:*") if b":read" not in k]
        held = {k: client.dump(k) for k in marks}
        run()
        last = last_batch()
        assert committed(consumers[0]) == committed(consumers[1]) == last
        (Path(args.checkpoint) / "clicked" / "commits" / str(last)).unlink()
        client.delete(*marks)
        for key, value in held.items():
            client.restore(key, 0, value)
        assert committed(consumers[1]) == before
        hop = run()
        if way == "foreachBatch":
            assert [(r.batch_id, r.skipped) for r in hop.reports] == [(last, True)]
        assert last_batch() == last
        assert committed(consumers[0]) == committed(consumers[1]) == last
    finally:
        spark.conf.unset(NO_DATA_BATCHES)
    exact(range(0, 450))

    # the clicks of that batch come again: the filter drops them, with its marks of batch 2
    produce(kafka_bootstrap, clicks, _clicks(range(425, 450)) + _clicks(range(450, 500)))
    produce(kafka_bootstrap, impressions, _impressions(range(450, 500)))
    hop = run()
    if way == "foreachBatch":
        assert sum(r.replays_dropped for r in hop.reports) == len(_clicks(range(425, 450)))
    exact(range(0, 500))


def test_a_join_is_refused_in_one_sentence_when_its_hops_do_not_share_a_query(
        spark, kafka_bootstrap, topics, redis_url, tmp_path):
    conf = {**_options(kafka_bootstrap, redis_url), "jw.sqe.spout.kafka.filterReplays": True}
    left, right = topics.impressions, topics.clicks
    a = sqe.Hop("j.left", topic=left, checkpoint=tmp_path / "a", conf=conf)
    b = sqe.Hop("j.right", topic=right, checkpoint=tmp_path / "b", conf=conf)
    with pytest.raises(sqe.SqeError, match=r"call read\(spark\) on that hop"):
        a.read(spark)
        a.exactly_once(lambda rows, batch: None, also=[b])
    b.read(spark)
    with pytest.raises(sqe.SqeError, match="both hops are one query, with one checkpoint"):
        a.exactly_once(lambda rows, batch: None, also=[b])
    same = sqe.Hop("j.again", topic=left, checkpoint=tmp_path / "a", conf=conf)
    same.read(spark)
    with pytest.raises(sqe.SqeError, match=f"both read topic {left}"):
        a.exactly_once(lambda rows, batch: None, also=[same])


@pytest.mark.slow
@pytest.mark.connect
def test_the_join_example_over_spark_connect_drops_each_sides_replays(
        connect_server, kafka_bootstrap, topics, redis_url, tmp_path):
    """foreachBatch: the server runs the pickled batch function, the joined hop's commit in it
    (the sink's commit is the classic one's, tested above)."""
    impressions, clicks, out = topics.impressions, topics.clicks, topics.clicked
    command = _command(topics, tmp_path / "ck", kafka_bootstrap, redis_url,
                       "--remote", connect_server.url)
    produce(kafka_bootstrap, impressions, _impressions(range(0, 200)))
    produce(kafka_bootstrap, clicks, _clicks(range(0, 200)))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # both sides' replays, inside the watermark, and new events
    produce(kafka_bootstrap, impressions, _impressions(range(170, 200)) + _impressions(
        range(200, 400)))
    produce(kafka_bootstrap, clicks, _clicks(range(160, 200)) + _clicks(range(200, 400)))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = [json.loads(r.value)["imp_id"] for r in read_topic(kafka_bootstrap, out)]
    assert sorted(got) == sorted(_matches(range(0, 400)))  # no replay joined twice
    client = redis.Redis.from_url(redis_url)
    held = {k.decode() for region in REGIONS for k in client.hgetall(region)}
    assert held == set(_matches(range(0, 400)))


@pytest.mark.slow
def test_the_join_example_is_exactly_once_through_kills_between_and_before_its_commits(
        kafka_bootstrap, topics, redis_url, tmp_path):
    impressions, clicks, out = topics.impressions, topics.clicks, topics.clicked
    command = _command(topics, tmp_path / "ck", kafka_bootstrap, redis_url)

    def killed_at(fault: str) -> None:
        marker, log = tmp_path / "marker", tmp_path / f"{fault}.log"
        proc = start_with_fault(command, fault, marker, log)
        wait_for_fault(proc, marker, log)
        kill_group(proc)

    def run_again() -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    def exact(ids: range) -> list[Any]:
        records = read_topic(kafka_bootstrap, out)
        kept = _next_hop(records)  # what the next hop's replay filter passes
        assert sorted(json.loads(r.value)["imp_id"] for r in kept) == sorted(_matches(ids))
        client = redis.Redis.from_url(redis_url)
        held = {k.decode() for region in REGIONS for k in client.hgetall(region)}
        assert held == set(_matches(ids))
        return records

    # killed between the impressions' commit and the clicks': run again, the clicks commit
    produce(kafka_bootstrap, impressions, _impressions(range(0, 200)))
    produce(kafka_bootstrap, clicks, _clicks(range(0, 200)))
    killed_at("joined-before-commit@0")
    run_again()
    assert len(exact(range(0, 200))) == len(_matches(range(0, 200)))  # nothing sent twice

    # replays on both sides and new events; killed with the states written, before the
    # commits: run again, the batch's Kafka rows are sent again with the same keys
    produce(kafka_bootstrap, impressions, _impressions(range(170, 200)) + _impressions(
        range(200, 400)))
    produce(kafka_bootstrap, clicks, _clicks(range(160, 200)) + _clicks(range(200, 400)))
    killed_at("before-commit@1")
    run_again()
    records = exact(range(0, 400))
    assert len(records) > len(_matches(range(0, 400)))  # the copies, dropped by the next hop
