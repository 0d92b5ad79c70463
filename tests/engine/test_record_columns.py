"""What a record carries besides its value, as columns a query reads, through sqe run and a
sqe.Hop: its headers (includeHeaders), its key, its timestamp, and a NULL value (a tombstone),
against the real broker and Redis."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import fastavro
import pytest
import yaml
from confluent_kafka import Producer

import sqe
from sqe.clients.kafka import CLIENT_DEFAULTS
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

SCHEMA = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}]}
STAMP = int(datetime(2026, 11, 29, 12, tzinfo=timezone.utc).timestamp() * 1000)


def _produce(kafka: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": kafka, **CLIENT_DEFAULTS})
    parsed = fastavro.parse_schema(SCHEMA)
    for o in range(6):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": f"e{o}"})
        headers = {0: [("trace", b"t0")], 1: [("trace", b"t1"), ("trace", b"again")],
                   2: None, 3: [("other", None)], 4: [("trace", b"t4")], 5: []}[o]
        producer.produce(topic, key=StreamMetadata(5, 0, o).to_bytes(),
                         value=None if o == 4 else out.getvalue(), partition=0,
                         headers=headers, timestamp=STAMP + o)
    assert producer.flush(30) == 0


SELECT = ["_offset", {"sql": "CAST(try_element_at(filter(_headers, h -> h.key = 'trace'), 1).value "
                             "AS STRING)"},
          {"sql": "size(_headers)"}, "id", {"sql": "_value IS NULL"},
          {"sql": "CAST(unix_millis(_timestamp) AS STRING)"}]
FIELDS = ["offset", "trace", "headers", "id", "tombstone", "stamp"]


def _expected(stamp_as=str) -> dict[int, dict]:
    traces = {0: "t0", 1: "t1", 4: "t4"}
    sizes = {0: 1, 1: 2, 2: 0, 3: 1, 4: 1, 5: 0}
    return {o: {"offset": o, "trace": traces.get(o), "headers": sizes[o],
                "id": None if o == 4 else f"e{o}", "tombstone": o == 4,
                "stamp": stamp_as(STAMP + o)} for o in range(6)}


def test_headers_key_timestamp_and_tombstones_are_columns(spark, kafka_bootstrap, kafka_topic,
                                                          redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    _produce(kafka_bootstrap, source)
    schema = tmp_path / "e.avsc"
    schema.write_text(json.dumps(SCHEMA))
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump([
        {"CreateStream": {"streamName": "In", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "avro",
                          "options": {"jw.sqe.spout.kafka.includeHeaders": True,
                                      "jw.sqe.spout.schema.file": str(schema),
                                      "jw.sqe.spout.kafka.filterReplays": True}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": FIELDS,
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": SELECT}, "from": {"objectName": "In"}}}]))
    plan = plan_topology(load_topology(path), conf={
        "jw.sqe.spout.kafka.brokers": kafka_bootstrap,
        "jw.sqe.state.kafka.brokers": kafka_bootstrap,
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url})
    run_topology(plan, spark, "columns", tmp_path / "ck", "once")
    rows = {json.loads(r.value)["offset"]: json.loads(r.value)
            for r in read_topic(kafka_bootstrap, dest)}
    # a JSON object of the fields leaves a NULL field out
    assert rows == {o: {k: v for k, v in row.items() if v is not None}
                    for o, row in _expected().items()}


def test_a_hop_reads_the_same_columns(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source = kafka_topic(1, "in")
    _produce(kafka_bootstrap, source)
    schema = tmp_path / "e.avsc"
    schema.write_text(json.dumps(SCHEMA))
    dest = kafka_topic(1, "out")
    hop = sqe.Hop("columns.in", topic=source, checkpoint=tmp_path / "hop", deserializer="avro",
                  conf={"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
                        "jw.sqe.state.kafka.brokers": kafka_bootstrap,
                        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
                        "jw.sqe.spout.kafka.startingOffsets": "earliest",
                        "jw.sqe.spout.kafka.includeHeaders": True,
                        "jw.sqe.spout.schema.file": str(schema)},
                  into=[sqe.InsertInto(objectName=dest, stateName="KAFKA", fields=["id"])])
    got: list[dict] = []

    def collect(rows, batch):  # type: ignore[no-untyped-def]
        out = rows.selectExpr(
            "_offset AS offset", "CAST(try_element_at(filter(_headers, h -> h.key = 'trace'), 1)"
            ".value AS STRING) AS trace", "size(_headers) AS headers", "id",
            "_value IS NULL AS tombstone", "unix_millis(_timestamp) AS stamp")
        got.extend(r.asDict() for r in out.collect())
        batch.write(dest, rows.where("id IS NOT NULL"))

    (hop.read(spark).writeStream.option("checkpointLocation", hop.checkpoint)
     .trigger(availableNow=True).foreachBatch(hop.exactly_once(collect)).start()
     .awaitTermination())
    assert {r["offset"]: r for r in got} == _expected(int)
