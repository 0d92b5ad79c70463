"""A replay-filtered chain of aggregates (real broker, Redis, Spark): enrich writes with
replays, a partition-local aggregation writes partial sums into Kafka keyed by StreamMetadata
(and is itself replayed), a third topology replay-filters the partials and sums them into
Redis; the totals are exact."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import redis
import yaml

from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.ledger.hwm import HwmStore
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

SMPP = "partitioners.SourcePartitionPartitioner"


def _file(tmp: Path, name: str, commands: list) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(commands))
    return path


def _kafka_out(topic: str, fields: list[str], exprs: list, source: str) -> dict:
    return {"Query": {"insertInto": {"objectName": topic, "stateName": "KAFKA", "fields": fields,
                                     "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                                 "jw.sqe.state.kafka.partitionClass": SMPP}},
                      "select": {"expressions": exprs}, "from": {"objectName": source}}}


def test_replayed_partial_aggregates_are_dropped_and_totals_are_exact(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    events, enriched, partials = kafka_topic(3, "ev"), kafka_topic(3, "en"), kafka_topic(2, "pa")
    rows = [(i % 3, {"id": i, "region": ["eu", "us", "ap", "sa"][i % 4], "amount": i % 17})
            for i in range(900)]
    produce(kafka_bootstrap, events, [(None, json.dumps(v).encode(), p) for p, v in rows])
    expected: dict[str, int] = defaultdict(int)
    for _, v in rows:
        expected[v["region"]] += v["amount"]

    enrich = _file(tmp_path, "enrich", [
        {"CreateStream": {"streamName": "Events", "objectName": events, "spoutName": "KAFKA",
                          "deserializer": "json"}},
        _kafka_out(enriched, ["region", "amount"], ["region", "amount"], "Events")])
    aggregate = _file(tmp_path, "aggregate", [
        {"CreateStream": {"streamName": "Enriched", "objectName": enriched, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True,
                                      "jw.sqe.spout.kafka.maxRecordsPerBatch": 700}}},
        _kafka_out(partials, ["region", "total"], ["region", {"Sum": ["amount"]}], "Enriched")])
    totals = _file(tmp_path, "totals", [
        {"CreateStream": {"streamName": "Partials", "objectName": partials, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
        {"Query": {"insertInto": {"objectName": "Totals", "stateName": "REDIS",
                                  "stateType": "TRANSACTIONAL", "fields": ["region", "total"],
                                  "options": {"jw.sqe.state.redis.datatype": "STRING",
                                              "jw.sqe.state.redis.keyname.fields": ["region"]}},
                   "select": {"expressions": ["region", {"Sum": ["total"]}]},
                   "from": {"objectName": "Partials"}}}])
    url = redis_url
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": url,
            "jw.sqe.state.redis.host": url.split("//")[1].split(":")[0],
            "jw.sqe.state.redis.port": url.rsplit(":", 1)[1].split("/")[0],
            "jw.sqe.state.redis.database": url.rsplit("/", 1)[1]}

    def run(path: Path, name: str, checkpoint: str):
        plan = plan_topology(load_topology(path), conf=conf)
        return run_topology(plan, spark, name, tmp_path / checkpoint, "once")

    run(enrich, "enrich", "ck-e1")
    run(enrich, "enrich", "ck-e2")  # a second writer run: every enriched record replayed
    assert len(read_topic(kafka_bootstrap, enriched)) == 1800
    first = run(aggregate, "aggregate", "ck-a1")
    assert sum(r.replays_dropped for r in first) == 900
    # the aggregation's commits are lost and it runs again: its partials are written twice
    store = HwmStore.from_url(url, "aggregate.Enriched", 3600)
    store.reset()
    store.client.close()
    run(aggregate, "aggregate", "ck-a2")
    written = read_topic(kafka_bootstrap, partials)
    keys = [StreamMetadata.from_bytes(r.key) for r in written]
    assert len(written) == 2 * len(set(keys))  # every partial twice, same key
    assert all(r.partition == k.partition % 2 for r, k in zip(written, keys, strict=True))

    reports = run(totals, "totals", "ck-t")
    assert sum(r.replays_dropped for r in reports) == len(written) // 2
    assert all(r.merged for r in reports if r.written)  # entries merged, not rows written
    assert sum(r.rows_written for r in reports) == 0 < sum(r.entries_merged for r in reports)
    client = redis.Redis.from_url(url, decode_responses=True)
    got = {region: json.loads(client.get(f"Totals:{region}:total"))[2] for region in expected}
    assert got == dict(expected)
