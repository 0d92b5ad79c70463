"""Topologies edited between runs on the same checkpoints: each row of the change table in
docs/operations.md ("Changing a topology"), against the real broker, Redis and Spark.

A change either continues exactly-once (load's output holds every event the chain should
deliver, once) or is refused in one sentence before anything is written."""

from __future__ import annotations

import logging
import re

import pytest
import redis

from sqe.cli.sample_events import sample_events
from sqe.engine.run.changes import TopologyChanged
from tests.support.chain import Chain, assert_each_once, new_chain
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]


class Waves:
    """Events produced in waves, and the ids the chain should have delivered so far."""

    def __init__(self, chain: Chain) -> None:
        self.chain, self.expected, self.first = chain, set(), 0
        self.keep = lambda event: True  # what enrich's where lets through

    def produce(self, count: int) -> set[str]:
        events = list(sample_events(count, 1, self.first))
        self.chain.produce(self.first, count)
        self.first += count
        ids = {e["event_id"] for e in events if self.keep(e)}
        self.expected |= ids
        return ids

    def run_both(self, **load_options) -> list:
        self.chain.run("enrich")
        reports = self.chain.run("load", **load_options)
        assert_each_once(self.chain, self.expected)
        return reports


def _hash(url: str, key: str) -> dict[str, str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return client.hgetall(key)
    finally:
        client.close()


@pytest.mark.slow
def test_changes_that_continue_exactly_once(spark, kafka_bootstrap, kafka_topic, redis_url,
                                            tmp_path, caplog):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    waves = Waves(chain)
    enrich, load = chain.commands["enrich"], chain.commands["load"]
    audit = load[2]["Query"]
    waves.produce(200)
    waves.run_both()

    # a field added to a select: load's audit query writes each event's region too
    audit["insertInto"]["fields"].append("region")
    audit["select"]["expressions"].append("region")
    waves.produce(200)
    waves.run_both()
    assert sum(r.value.startswith(b"{") for r in read_topic(kafka_bootstrap, chain.loaded_topic)
               ) == 200

    # a where changed: enrich passes only the events above 50
    enrich[1]["Query"]["where"] = {">": ["amount", 50]}
    waves.keep = lambda event: event["amount"] > 50
    waves.produce(200)
    waves.run_both()

    # a query added: load also keeps a hash of the events it loads from now on
    load.append({"Query": {
        "insertInto": {"objectName": "late_log", "stateName": "REDIS",
                       "stateType": "TRANSACTIONAL", "fields": ["log", "event_id", "region"],
                       "options": {"jw.sqe.state.redis.datatype": "HASH",
                                   "jw.sqe.state.redis.keyname.fields": ["log"],
                                   "jw.sqe.state.redis.fieldname.fields": ["event_id"]}},
        "select": {"expressions": [{"sql": "'late_log'"}, "event_id", "region"]},
        "from": {"objectName": "Enriched"}}})
    with caplog.at_level(logging.INFO, logger="sqe"):
        new = waves.produce(200)
        waves.run_both()
    assert any("late_log is new" in r.getMessage() for r in caplog.records)
    assert set(_hash(redis_url, "late_log")) == new  # this wave's events, not earlier ones

    # a query removed: load no longer writes events_by_region
    del load[1]
    waves.produce(200)
    waves.run_both()

    # maxRecordsPerBatch changed: load reads the next wave in batches of 30
    waves.produce(240)
    reports = waves.run_both(**{"jw.sqe.spout.kafka.maxRecordsPerBatch": 30})
    assert len(reports) >= 3

    # filterReplays turned off (said), and on again (said)
    caplog.clear()
    load[0]["CreateStream"]["options"]["jw.sqe.spout.kafka.filterReplays"] = False
    with caplog.at_level(logging.INFO, logger="sqe"):
        waves.produce(100)
        waves.run_both()
        load[0]["CreateStream"]["options"]["jw.sqe.spout.kafka.filterReplays"] = True
        waves.produce(100)
        waves.run_both()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "no longer filters replays" in said and "filters replays from this run on" in said


def _refused(chain: Chain, name: str, pattern: str, **kwargs) -> str:
    """Run ``name`` expecting a refusal matching ``pattern``; nothing may have been written."""
    enriched, loaded = (len(read_topic(chain.kafka, t)) for t in (chain.enriched,
                                                                  chain.loaded_topic))
    with pytest.raises(TopologyChanged) as refused:
        chain.run(name, **kwargs)
    text = str(refused.value)
    assert re.search(pattern, text), text
    assert "\n" not in text and text.count(". ") == 0, text  # one sentence
    assert (len(read_topic(chain.kafka, chain.enriched)),
            len(read_topic(chain.kafka, chain.loaded_topic))) == (enriched, loaded)
    return text


def _rename_stream(commands: list, name: str) -> None:
    """Rename the (one) stream of ``commands`` to ``name``, and what its queries read."""
    for command in commands:
        if "CreateStream" in command:
            command["CreateStream"]["streamName"] = name
        else:
            command["Query"]["from"]["objectName"] = name


def test_changes_that_are_refused_before_anything_is_written(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    waves = Waves(chain)
    enrich, load = chain.commands["enrich"], chain.commands["load"]
    waves.produce(200)
    waves.run_both()
    waves.produce(200)  # what the refused runs would have read

    # a stream renamed
    _rename_stream(load, "Enriched2")
    _refused(chain, "load", r"stream Enriched2 has no checkpoint yet, but stream Enriched, "
                            r".* rename it back to Enriched")
    _rename_stream(load, "Enriched")

    # the topology renamed, on the same checkpoint
    _refused(chain, "load", r"run as consumer load\.Enriched, and this run is load2\.Enriched "
                            r".* run with --name load", as_name="load2")

    # the source topic changed
    load[0]["CreateStream"]["objectName"] = chain.events
    _refused(chain, "load", rf"read topic {chain.enriched} .* now reads topic {chain.events}")
    load[0]["CreateStream"]["objectName"] = chain.enriched

    # the HWM store moved to a Redis database that holds nothing of the consumer
    other = re.sub(r"/(\d+)$", lambda m: f"/{(int(m.group(1)) + 128) % 256}", redis_url)
    redis.Redis.from_url(other).flushdb()
    _refused(chain, "load", r"holds nothing of consumer load\.Enriched",
             **{"jw.sqe.spout.kafka.filterReplays.redis.url": other})

    # the partitioner, the key type or chunking of enrich's Kafka state changed
    options = enrich[1]["Query"]["insertInto"]["options"]
    for key, value, what in (
            ("jw.sqe.state.kafka.partitionClass", "partitioners.Murmur2Partitioner",
             "the partitioner changed from partitioners.SourcePartitionPartitioner to "
             "partitioners.Murmur2Partitioner"),
            ("jw.sqe.state.kafka.keytype", "messagehash",
             "the key type changed from streammetadata to messagehash"),
            ("jw.sqe.state.kafka.chunking", True, "chunking was turned on")):
        kept = dict(options)
        options[key] = value
        _refused(chain, "enrich", rf"places records differently .*\({re.escape(what)}\).* "
                                  r"once with --adopt-layout")
        options.clear()
        options.update(kept)

    # the refused runs changed nothing: the chain goes on exactly-once
    waves.run_both()

    # once load has caught up, enrich adopts a new layout (message hashes, no partitioner):
    # load cannot judge those keys and passes each record once
    options["jw.sqe.state.kafka.keytype"] = "messagehash"
    del options["jw.sqe.state.kafka.partitionClass"]
    waves.produce(200)
    chain.run("enrich", adopt=True)
    reports = chain.run("load")
    assert_each_once(chain, waves.expected)
    assert sum(r.unparseable_keys for r in reports) == 200


def test_a_stream_added_starts_at_its_starting_offsets_and_one_removed_is_said(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, caplog):
    chain = new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path)
    waves = Waves(chain)
    load = chain.commands["load"]
    first = waves.produce(200)
    waves.run_both()

    # a stream added: load also keeps a hash of every raw event, from the topic's start
    raw = [{"CreateStream": {"streamName": "Raw", "objectName": chain.events,
                             "spoutName": "KAFKA", "deserializer": "json",
                             "options": {"jw.sqe.spout.kafka.startingOffsets": "earliest"}}},
           {"Query": {"insertInto": {
               "objectName": "raw_log", "stateName": "REDIS",
               "fields": ["log", "event_id", "user"],
               "options": {"jw.sqe.state.redis.datatype": "HASH",
                           "jw.sqe.state.redis.keyname.fields": ["log"],
                           "jw.sqe.state.redis.fieldname.fields": ["event_id"]}},
               "select": {"expressions": [{"sql": "'raw_log'"}, "event_id", "user"]},
               "from": {"objectName": "Raw"}}}]
    load += raw
    second = waves.produce(200)
    waves.run_both()
    assert set(_hash(redis_url, "raw_log")) == first | second

    # the stream removed again: the other goes on, and the run says the folder stays
    del load[-2:]
    with caplog.at_level(logging.INFO, logger="sqe"):
        waves.produce(200)
        waves.run_both()
    assert any("stream Raw is no longer in the topology" in r.getMessage()
               for r in caplog.records)
    assert len(_hash(redis_url, "raw_log")) == 400
