"""Topics that gain partitions, or lose them, under a chain: real broker, Redis and Spark.

The chain is the shipped enrich.yaml -> `enriched` -> load.yaml (tests/support/chain.py);
each test checks load's output: every event exactly once."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.config.plan import plan_topology
from sqe.engine.run.changes import TopologyChanged
from sqe.engine.run.runner import run_topology
from sqe.errors import RunError, RunStopped
from sqe.lang.topology import load_topology
from tests.support.chain import add_partitions, assert_each_once, new_chain
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]


@pytest.mark.parametrize("chunking", [False, True], ids=["records", "chunks"])
def test_a_topic_that_gains_partitions_loses_nothing_for_a_reader_behind_it(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog, chunking):
    """The issue's case: `enriched` goes from 2 to 4 partitions between two runs of enrich
    (4 source partitions), and load reads the whole backlog afterwards in small batches.
    Placing source partitions 2 and 3 by ``% 4`` after the change would put their newer
    records in partitions 2 and 3, read before their older ones in 0 and 1, which the marks
    would then drop as replays."""
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, chunking)
    chain.produce(0, 1200)
    chain.run("enrich")
    add_partitions(kafka_bootstrap, chain.enriched, 4)
    chain.produce(1200, 1200)
    with caplog.at_level(logging.INFO, logger="sqe"):
        chain.run("enrich")
    said = [r.getMessage() for r in caplog.records if "keeps placing records" in r.getMessage()]
    assert len(said) == 1 and "has 4 partitions now" in said[0] and "first 2" in said[0]
    assert set(chain.by_partition()) == {0, 1}  # nothing moved to the new partitions

    small = {"jw.sqe.spout.kafka.maxRecordsPerBatch": 6 if chunking else 300}  # chunks: of 50
    reports = chain.run("load", **small)
    assert len(reports) >= 4
    assert_each_once(chain, 2400)

    # Once load has caught up, enrich adopts the 4 partitions; load loses nothing after it.
    chain.produce(2400, 1200)
    chain.run("enrich", adopt=True)
    assert set(chain.by_partition()) == {0, 1, 2, 3}
    chain.run("load", **small)
    assert_each_once(chain, 3600)


def test_a_source_topic_that_gains_partitions_is_read_from_their_start_by_once(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    chain.produce(0, 400)
    chain.run("enrich")
    add_partitions(kafka_bootstrap, chain.events, 6)
    chain.produce(400, 600, partitions=6)
    reports = chain.run("enrich")
    assert sum(r.records_read for r in reports) == 600
    assert sorted(r.partition for r in read_topic(kafka_bootstrap, chain.events)
                  if r.partition >= 4)  # the new partitions hold records
    chain.run("load")
    assert_each_once(chain, 1000)


def _recreate(kafka: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and, with ``partitions``, create it again with that many."""
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([topic])[topic].result(30)
    for _ in range(50 if partitions else 0):  # the broker may take a moment to forget it
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            return
        except KafkaException:  # "topic exists" until the deletion is done
            time.sleep(0.2)
    assert not partitions, f"could not create {topic} again"


@pytest.mark.parametrize("partitions", [2, 4, 0], ids=["fewer", "same-count", "gone"])
def test_a_source_topic_deleted_or_created_again_is_one_sentence(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, partitions):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    chain.produce(0, 400)
    chain.run("enrich")
    _recreate(kafka_bootstrap, chain.events, partitions)
    if partitions:
        chain.produce(400, 8, partitions=partitions)
    started = time.monotonic()
    with pytest.raises(RunError) as failed:
        chain.run("enrich")
    text = str(failed.value)
    assert "\n" not in text and time.monotonic() - started < 60, text
    if partitions == 0:
        assert f"Kafka source {chain.events}: the topic on " in text and "nknown topic" in text
        return
    assert "deleted and created again" in text, text
    assert (" gone " in text) if partitions == 2 else ("before offset" in text), text


def test_a_destination_topic_created_again_with_fewer_partitions_is_refused(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    add_partitions(kafka_bootstrap, chain.enriched, 4)
    chain.produce(0, 200)
    chain.run("enrich")
    _recreate(kafka_bootstrap, chain.enriched, 2)
    chain.produce(200, 200)
    with pytest.raises(TopologyChanged, match="has 2 partitions, fewer than the 4"):
        chain.run("enrich")
    assert read_topic(kafka_bootstrap, chain.enriched) == []  # refused before writing


def _wait(what: str, condition, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_partitions_added_to_both_topics_while_the_chain_runs_lose_nothing(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    """Both topologies run as endless streams while `events` goes from 4 to 6 partitions and
    `enriched` from 2 to 4, with load behind by several batches: enrich picks up the new
    source partitions from their start, keeps `enriched`'s layout and says so, and every
    event reaches load's output once."""
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    chain.produce(0, 1200)
    stops = {name: threading.Event() for name in ("enrich", "load")}
    failures: dict[str, BaseException] = {}

    def endless(name: str, **options) -> None:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(chain.commands[name], sort_keys=False))
        plan = plan_topology(load_topology(path), conf={**chain.conf(), **options})
        try:
            run_topology(plan, spark, name, tmp_path / "ck" / name, "forever", stop=stops[name])
        except RunStopped:
            pass
        except BaseException as exc:  # handed to the test's thread
            failures[name] = exc

    threads = [threading.Thread(target=endless, args=("enrich",), daemon=True),
               threading.Thread(target=endless, args=("load",), daemon=True,
                                kwargs={"jw.sqe.spout.kafka.maxRecordsPerBatch": 100})]
    with caplog.at_level(logging.INFO, logger="sqe"):
        for t in threads:
            t.start()
        try:
            _wait("enrich's first 1200 events", lambda: sum(chain.by_partition().values()) >= 1200
                  or bool(failures))
            behind = len(chain.loaded())
            add_partitions(kafka_bootstrap, chain.enriched, 4)
            add_partitions(kafka_bootstrap, chain.events, 6)
            chain.produce(1200, 1200, partitions=6)
            _wait("load's output of 2400 events", lambda: len(chain.loaded()) >= 2400
                  or bool(failures))
        finally:
            for name in ("enrich", "load"):
                stops[name].set()
            for t in threads:
                t.join(120)
    assert not failures, failures
    assert behind < 1200  # load was behind when the partitions were added
    assert_each_once(chain, 2400)
    assert set(chain.by_partition()) == {0, 1}
    assert any("has 4 partitions now" in r.getMessage() for r in caplog.records)
