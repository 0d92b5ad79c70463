"""Avro streams through sqe run, against the real broker, Redis and a Schema Registry speaking
the registry's REST API (:mod:`support.schema_registry`): every field a column, a schema
that evolves mid-stream read on without a restart, and each kind of poison record failing the
batch in one sentence or going to the dead-letter topic with its reason, every good record
written exactly once.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
import yaml

from sqe.clients.kafka import read_all
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import SqeError
from sqe.lang.topology import load_topology
from sqe.wire.framing import frame
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from sqe.wire.keys import StreamMetadata
from support.schema_registry import SchemaRegistry
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 31

V1 = {"type": "record", "name": "Click", "namespace": "ads", "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK"]}},
    {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
        {"name": "country", "type": "string"}]}], "default": None},
    {"name": "legacy", "type": "string", "default": "old"},
]}
#: V1 with a field added (with a default) and one removed: the reader (V1) reads both
V2 = {**V1, "fields": [f for f in V1["fields"] if f["name"] != "legacy"]
      + [{"name": "campaign", "type": "string", "default": "none"}]}


def _avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _click(o: int, schema: dict) -> dict:
    from datetime import datetime, timezone
    from decimal import Decimal
    record = {"id": f"c{o}", "amount": Decimal(o) / 100, "kind": "CLICK" if o % 2 else "VIEW",
              "at": datetime(2026, 11, 29, tzinfo=timezone.utc),
              "geo": {"country": "NL"} if o % 3 else None}
    if schema is V1:
        record["legacy"] = "was"
    else:
        record["campaign"] = "winter"
    return record


def _write(tmp_path: Path, source: str, dest: str) -> Path:
    commands = [
        {"CreateStream": {"streamName": "Clicks", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "avro",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA",
                                  "fields": ["id", "amount", "kind", "country", "legacy"],
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": [
                       "id", {"sql": "CAST(amount AS STRING)"}, "kind",
                       {"sql": "coalesce(geo.country, '-')"}, "legacy"]},
                   "from": {"objectName": "Clicks"},
                   "where": {"sql": "at >= TIMESTAMP '2026-01-01 00:00:00'"}}},
    ]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return path


def _run(spark, path: Path, tmp_path: Path, kafka: str, redis_url: str, registry: str,
         version: int | None = 1, **conf):
    plan = plan_topology(load_topology(path), conf={
        "jw.sqe.spout.kafka.brokers": kafka, "jw.sqe.state.kafka.brokers": kafka,
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
        "jw.sqe.spout.schemaRegistry.url": registry,
        **({"jw.sqe.spout.schema.version": version} if version else {}), **conf})
    return run_topology(plan, spark, "avro", tmp_path / "ck", "once")


def test_an_evolving_schema_and_each_poison_record(spark, kafka_bootstrap, kafka_topic,
                                                   redis_url, tmp_path):
    source, dest = kafka_topic(1, "clicks"), kafka_topic(1, "out")
    with SchemaRegistry() as registry:
        v1 = registry.register(f"{source}-value", json.dumps(V1))
        path = _write(tmp_path, source, dest)
        key = lambda o: StreamMetadata(PID, 0, o).to_bytes()  # noqa: E731
        produce(kafka_bootstrap, source,
                [(key(o), frame(v1, _avro(V1, _click(o, V1))), 0) for o in range(50)])
        (first,) = _run(spark, path, tmp_path, kafka_bootstrap, redis_url, registry.url)
        assert sum(first.written.values()) == 50, first.written
        # the topic's schema evolves: a run reading as the subject's latest (V2) is refused,
        # since a query reads a field V2 removed; one pinned to version 1 reads V2's records
        v2 = registry.register(f"{source}-value", json.dumps(V2))
        with pytest.raises(SqeError, match="no field legacy in stream Clicks; it has the fields "
                                           r"of subject .* \(latest, schema id 2\)"):
            _run(spark, path, tmp_path, kafka_bootstrap, redis_url, registry.url, None)
        poison = {60: frame(v1, b"\x02"),              # bytes that are not V1's
                  61: b'{"id": "json"}',               # not the wire format
                  62: frame(v2 + 40, b"\x00"),         # an id the registry does not hold
                  63: b"\x00\x00"}                     # shorter than the header
        produce(kafka_bootstrap, source, [
            (key(o), poison.get(o, frame(v2, _avro(V2, _click(o, V2)))), 0)
            for o in range(50, 100)])
        with pytest.raises(SqeError) as failed:
            _run(spark, path, tmp_path, kafka_bootstrap, redis_url, registry.url)
        text = str(failed.value)
        assert f"bad record at {source}/0 offset 60" in text, text
        assert "badRecordPolicy: deadletter" in text and "\n" not in text.strip(), text
        dead = f"{source}-dead"
        conf = {"jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
                "jw.sqe.spout.kafka.deadLetterTopic": dead}
        (second,) = _run(spark, path, tmp_path, kafka_bootstrap, redis_url, registry.url, **conf)
        assert second.source.dead_letters == 4
        assert _run(spark, path, tmp_path, kafka_bootstrap, redis_url, registry.url,
                    **conf) == []
    letters = {dict(m.headers())[DEAD_LETTER_SOURCE].decode(): m for m in read_all(kafka_bootstrap,
                                                                                  dead)}
    reasons = {where: dict(m.headers())[DEAD_LETTER_REASON].decode()
               for where, m in letters.items()}
    assert set(reasons) == {f"{source}/0/{o}" for o in poison}
    assert "does not decode as Avro" in reasons[f"{source}/0/60"]
    assert "first byte is 0x7b, not the magic byte 0x00" in reasons[f"{source}/0/61"]
    assert f"schema id {v2 + 40} is not in the schema registry" in reasons[f"{source}/0/62"]
    assert "shorter than its 5-byte header" in reasons[f"{source}/0/63"]
    assert all(letters[f"{source}/0/{o}"].value() == v for o, v in poison.items())
    rows = [r.value.decode() for r in read_topic(kafka_bootstrap, dest)]
    assert len(rows) == 96 and len(set(rows)) == 96  # each good record once
    by_id = {json.loads(r)["id"]: json.loads(r) for r in rows} if rows[0].startswith("{") else None
    assert by_id is not None, rows[:2]
    assert by_id["c7"] == {"id": "c7", "amount": "0.07", "kind": "CLICK", "country": "NL",
                           "legacy": "was"}
    assert by_id["c99"] == {"id": "c99", "amount": "0.99", "kind": "CLICK", "country": "-",
                            "legacy": "old"}  # written by V2, which has no legacy: its default


def test_a_hop_writes_avro_that_a_plain_consumer_and_the_next_hop_read(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    source, middle, dest = kafka_topic(1, "clicks"), kafka_topic(2, "mid"), kafka_topic(1, "out")
    with SchemaRegistry() as registry:
        v1 = registry.register(f"{source}-value", json.dumps(V1))
        produce(kafka_bootstrap, source, [
            (StreamMetadata(PID, 0, o).to_bytes(), frame(v1, _avro(V1, _click(o, V1))), 0)
            for o in range(40)])
        first = [
            {"CreateStream": {"streamName": "Clicks", "objectName": source, "spoutName": "KAFKA",
                              "deserializer": "avro",
                              "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
            {"Query": {"insertInto": {"objectName": middle, "stateName": "KAFKA",
                                      "fields": ["id", "amount", "at", "geo"],
                                      "options": {
                                          "jw.sqe.state.kafka.keytype": "StreamMetadata",
                                          "jw.sqe.state.kafka.partitionClass":
                                              "partitioners.SourcePartitionPartitioner",
                                          "jw.sqe.state.kafka.serializer": "avro",
                                          "jw.sqe.state.kafka.schemaRegistry.url": registry.url}},
                       "select": {"expressions": ["id", "amount", "at", "geo"]},
                       "from": {"objectName": "Clicks"}}}]
        second = [
            {"CreateStream": {"streamName": "Mid", "objectName": middle, "spoutName": "KAFKA",
                              "deserializer": "avro",
                              "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
            {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA",
                                      "fields": ["id", "country"],
                                      "options": {"jw.sqe.state.kafka.keytype": "field"}},
                       "select": {"expressions": ["id", {"sql": "geo.country"}]},
                       "from": {"objectName": "Mid"}, "where": {"sql": "amount > 0.1"}}}]
        for name, commands in (("first", first), ("second", second)):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(commands, sort_keys=False))
            for _ in range(2):  # the second run finds nothing new
                plan = plan_topology(load_topology(path), conf={
                    "jw.sqe.spout.kafka.brokers": kafka_bootstrap,
                    "jw.sqe.state.kafka.brokers": kafka_bootstrap,
                    "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
                    "jw.sqe.spout.schemaRegistry.url": registry.url})
                run_topology(plan, spark, name, tmp_path / f"ck-{name}", "once")
        assert f"{middle}-value" in registry.subjects
        deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
        read = [deserializer(r.value, SerializationContext(middle, MessageField.VALUE))
                for r in read_topic(kafka_bootstrap, middle)]
    assert sorted(r["id"] for r in read) == sorted(f"c{o}" for o in range(40))
    c4 = next(r for r in read if r["id"] == "c4")
    assert str(c4["amount"]) == "0.04" and c4["geo"] == {"country": "NL"}
    assert c4["at"].year == 2026
    out = {r.key.decode(): r.value for r in read_topic(kafka_bootstrap, dest)}
    assert out == {f"c{o}": (b"NL" if o % 3 else None) for o in range(11, 40)}


def test_hops_read_avro_and_write_plain_avro_of_a_schema_file(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    import sqe

    source, middle = kafka_topic(1, "clicks"), kafka_topic(1, "mid")
    out_schema = tmp_path / "out.avsc"
    out_schema.write_text(json.dumps({"type": "record", "name": "Out", "fields": [
        {"name": "id", "type": "string"}, {"name": "cents", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None}]}))
    common = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
              "jw.sqe.state.kafka.brokers": kafka_bootstrap,
              "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
              "jw.sqe.spout.kafka.startingOffsets": "earliest",
              "jw.sqe.spout.kafka.filterReplays": True}
    with SchemaRegistry() as registry:
        v1 = registry.register(f"{source}-value", json.dumps(V1))
        produce(kafka_bootstrap, source, [
            (StreamMetadata(PID, 0, o).to_bytes(), frame(v1, _avro(V1, _click(o, V1))), 0)
            for o in range(30)])
        first = sqe.Hop("first.clicks", topic=source, checkpoint=tmp_path / "first",
                        deserializer="avro",
                        conf={**common, "jw.sqe.spout.schemaRegistry.url": registry.url},
                        into=[sqe.InsertInto(objectName=middle, stateName="KAFKA",
                                             fields=["id", "cents"], options={
                                                 "jw.sqe.state.kafka.keytype": "StreamMetadata",
                                                 "jw.sqe.state.kafka.serializer": "avro",
                                                 "jw.sqe.state.kafka.schema.file":
                                                     str(out_schema)})])
        rows = first.read(spark)
        assert rows.schema["amount"].dataType.simpleString() == "decimal(9,2)"
        cents = rows.selectExpr("*", "CAST(amount * 100 AS BIGINT) AS cents")
        first.write_stream(cents).trigger(availableNow=True).start().awaitTermination()
    dest = kafka_topic(1, "out")
    second = sqe.Hop("second.mid", topic=middle, checkpoint=tmp_path / "second",
                     deserializer="avro",
                     conf={**common, "jw.sqe.spout.schema.file": str(out_schema)},
                     into=[sqe.InsertInto(objectName=dest, stateName="KAFKA", fields=["id"])])
    got: list[tuple[str, int, object]] = []

    def collect(batch_rows, batch):  # type: ignore[no-untyped-def]
        got.extend((r["id"], r["cents"], r["note"]) for r in batch_rows.collect())
        batch.write(dest, batch_rows)

    (second.read(spark).writeStream.option("checkpointLocation", second.checkpoint)
     .trigger(availableNow=True).foreachBatch(second.exactly_once(collect)).start()
     .awaitTermination())
    assert sorted(got) == sorted((f"c{o}", o, None) for o in range(30))


@pytest.mark.slow
@pytest.mark.postgres
def test_the_chain_in_avro_is_exactly_once_through_crashes(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    """The README's chain with enrich writing Avro through a registry and load reading it:
    enrich SIGKILLed mid-batch and run again (its replays are Avro records too), load killed
    before its commit and run again; each event once in Redis and Postgres."""
    from sqe.cli.sample_events import produce_events
    from sqe.faults import kill_group
    from tests.engine.test_exactly_once import EVENTS, Chain, _assert_each_event_once

    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    with SchemaRegistry() as registry:
        chain = Chain(tmp_path, kafka_bootstrap, events, enriched, redis_url, postgres_dsn)
        enrich = yaml.safe_load(chain.files["enrich"].read_text())
        enrich[1]["Query"]["insertInto"]["options"].update({
            "jw.sqe.state.kafka.serializer": "avro",
            "jw.sqe.state.kafka.schemaRegistry.url": registry.url})
        load = yaml.safe_load(chain.files["load"].read_text())
        stream = load[0]["CreateStream"]
        stream["deserializer"] = "avro"
        stream["options"].pop("jw.sqe.spout.fields")
        stream["options"]["jw.sqe.spout.schemaRegistry.url"] = registry.url
        chain.files["enrich"].write_text(yaml.safe_dump(enrich, sort_keys=False))
        chain.files["load"].write_text(yaml.safe_dump(load, sort_keys=False))
        produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
        expected = {f"e{i}" for i in range(EVENTS)}

        proc, _ = chain.start_with_fault("enrich", "kafka-state-sent@400")
        chain.wait(proc, "enrich", "kafka-state-sent@400")
        kill_group(proc)
        sent = len(read_topic(kafka_bootstrap, enriched))
        done = chain.run("enrich")
        assert done.returncode == 0, done.stderr[-3000:]
        records = read_topic(kafka_bootstrap, enriched)
        assert len(records) - EVENTS == sent and sent >= 400
        assert all(r.value[:1] == b"\x00" for r in records)  # the wire format, every one
        assert list(registry.subjects) == [f"{enriched}-value"]

        batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=2000")
        proc, _ = chain.start_with_fault("load", "before-commit", "wait", *batch)
        chain.wait(proc, "load", "before-commit")
        kill_group(proc)
        done = chain.run("load", *batch)
        assert done.returncode == 0, done.stderr[-3000:]
    _assert_each_event_once(chain, expected)
