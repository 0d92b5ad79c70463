"""Protobuf streams through sqe run, against the real broker, Redis and a Schema Registry
speaking the registry's REST API (:mod:`support.schema_registry`): every field a column, a
schema that evolves mid-stream read on without a restart, each kind of poison record sent to the
dead-letter topic with its reason, and a hop writing Protobuf that confluent-kafka's own
deserializer and the next hop read, every good record once.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from google.protobuf import descriptor_pb2, text_format
from google.protobuf.message_factory import GetMessageClass

from sqe.clients.kafka import read_all
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.wire.framing import frame, index_bytes
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from sqe.wire.keys import StreamMetadata
from sqe.wire.protobuf_schema import ProtoSchema, descriptor
from support.schema_registry import SchemaRegistry
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 32
_FILE = """
name: "ads/click.proto" package: "ads" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto"
message_type { name: "Click"
  field { name: "id" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL }
  field { name: "amount" number: 2 type: TYPE_DOUBLE label: LABEL_OPTIONAL }
  field { name: "at" number: 3 type: TYPE_MESSAGE label: LABEL_OPTIONAL
          type_name: ".google.protobuf.Timestamp" }
  field { name: "kind" number: 4 type: TYPE_ENUM label: LABEL_OPTIONAL type_name: ".ads.Kind" }
  field { name: "geo" number: 5 type: TYPE_MESSAGE label: LABEL_OPTIONAL type_name: ".ads.Geo" }
  %s
}
message_type { name: "Geo"
  field { name: "country" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL } }
enum_type { name: "Kind" value { name: "VIEW" number: 0 } value { name: "CLICK" number: 1 } }
"""
#: V1 has ``legacy``; V2 dropped it and added ``campaign``: a V1 reader reads both
V1 = ProtoSchema.of(text_format.Parse(
    _FILE % 'field { name: "legacy" number: 6 type: TYPE_STRING label: LABEL_OPTIONAL }',
    descriptor_pb2.FileDescriptorProto()), (), "ads.Click")
V2 = ProtoSchema.of(text_format.Parse(
    _FILE % 'field { name: "campaign" number: 7 type: TYPE_STRING label: LABEL_OPTIONAL }',
    descriptor_pb2.FileDescriptorProto()), (), "ads.Click")


def _click(o: int, schema: ProtoSchema) -> bytes:
    cls = GetMessageClass(descriptor(schema))
    message = cls(id=f"c{o}", amount=o / 100, kind=o % 2)
    message.at.FromDatetime(datetime(2026, 11, 29, tzinfo=timezone.utc))
    if o % 3:
        message.geo.country = "NL"
    setattr(message, "legacy" if schema is V1 else "campaign", "was" if schema is V1 else "w")
    return message.SerializeToString()


def _conf(kafka: str, redis_url: str, registry: str, **more) -> dict:
    return {"jw.sqe.spout.kafka.brokers": kafka, "jw.sqe.state.kafka.brokers": kafka,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
            "jw.sqe.spout.schemaRegistry.url": registry, **more}


def _run(spark, commands: list, name: str, tmp_path: Path, conf: dict):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return run_topology(plan_topology(load_topology(path), conf=conf), spark, name,
                        tmp_path / f"ck-{name}", "once")


def test_protobuf_evolves_poison_goes_to_the_dead_letters_and_hops_read_what_hops_write(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    source, middle, dest = kafka_topic(1, "clicks"), kafka_topic(2, "mid"), kafka_topic(1, "out")
    dead = f"{source}-dead"
    with SchemaRegistry() as registry:
        v1 = registry.register(f"{source}-value", V1.file, "PROTOBUF")
        avro_id = registry.register("other-value", json.dumps({"type": "string"}))
        v2 = registry.register(f"{source}-value", V2.file, "PROTOBUF")
        key = lambda o: StreamMetadata(PID, 0, o).to_bytes()  # noqa: E731
        poison = {60: frame(v2, b"\x00\xff\xff"),              # bytes that do not parse
                  61: b'{"id": "json"}',                       # not the wire format
                  62: frame(v2 + 40, b"\x00"),                 # an id the registry lacks
                  63: b"\x00\x00",                             # shorter than the header
                  64: frame(avro_id, b"\x00"),                 # an Avro schema's id
                  65: frame(v1, index_bytes([1]) + b"")}       # an ads.Geo, not a Click
        produce(kafka_bootstrap, source, [
            (key(o), poison.get(o) or frame(v1 if o < 50 else v2,
                                            index_bytes([0]) + _click(o, V1 if o < 50 else V2)),
             0)
            for o in range(100)])
        first = [
            {"CreateStream": {"streamName": "Clicks", "objectName": source, "spoutName": "KAFKA",
                              "deserializer": "protobuf",
                              "options": {"jw.sqe.spout.kafka.filterReplays": True,
                                          "jw.sqe.spout.schema.version": 1}}},
            {"Query": {"insertInto": {"objectName": middle, "stateName": "KAFKA",
                                      "fields": ["id", "amount", "at", "kind", "country",
                                                 "legacy"],
                                      "options": {
                                          "jw.sqe.state.kafka.keytype": "StreamMetadata",
                                          "jw.sqe.state.kafka.partitionClass":
                                              "partitioners.SourcePartitionPartitioner",
                                          "jw.sqe.state.kafka.serializer": "protobuf",
                                          "jw.sqe.state.kafka.schemaRegistry.url": registry.url}},
                       "select": {"expressions": ["id", "amount", "at", "kind",
                                                  {"sql": "geo.country"}, "legacy"]},
                       "from": {"objectName": "Clicks"}}}]
        conf = _conf(kafka_bootstrap, redis_url, registry.url,
                     **{"jw.sqe.spout.kafka.badRecordPolicy": "deadletter",
                        "jw.sqe.spout.kafka.deadLetterTopic": dead})
        (done,) = _run(spark, first, "first", tmp_path, conf)
        assert done.source.dead_letters == len(poison) and sum(done.written.values()) == 94
        second = [
            {"CreateStream": {"streamName": "Mid", "objectName": middle, "spoutName": "KAFKA",
                              "deserializer": "protobuf",
                              "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
            {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA",
                                      "fields": ["id", "country"],
                                      "options": {"jw.sqe.state.kafka.keytype": "field"}},
                       "select": {"expressions": ["id", {"sql": "coalesce(country, '-')"}]},
                       "from": {"objectName": "Mid"},
                       "where": {"sql": "amount > 0.1 AND kind = 'CLICK'"}}}]
        for _ in range(2):  # the second run of each finds nothing new
            _run(spark, second, "second", tmp_path, _conf(kafka_bootstrap, redis_url,
                                                          registry.url))
        assert _run(spark, first, "first", tmp_path, conf) == []
        client = SchemaRegistryClient({"url": registry.url})
        written = registry.subjects[f"{middle}-value"]
        cls = GetMessageClass(descriptor(ProtoSchema(registry.schemas[written[0]][1])))
        deserializer = ProtobufDeserializer(cls, {"use.deprecated.format": False})
        read = [deserializer(r.value, SerializationContext(middle, MessageField.VALUE))
                for r in read_topic(kafka_bootstrap, middle)]
        del client
    reasons = {dict(m.headers())[DEAD_LETTER_SOURCE].decode():
               dict(m.headers())[DEAD_LETTER_REASON].decode() for m in read_all(kafka_bootstrap,
                                                                                dead)}
    assert set(reasons) == {f"{source}/0/{o}" for o in poison}, reasons
    assert f"the value (schema id {v2}) does not decode as message ads.Click" in reasons[
        f"{source}/0/60"]
    assert "first byte is 0x7b, not the magic byte 0x00" in reasons[f"{source}/0/61"]
    assert f"schema id {v2 + 40} is not in the schema registry" in reasons[f"{source}/0/62"]
    assert "shorter than its 5-byte header" in reasons[f"{source}/0/63"]
    assert f"schema id {avro_id} is a schema of type AVRO, not Protobuf" in reasons[f"{source}/0/64"]
    assert "is a message of type ads.Geo, the stream reads ads.Click" in reasons[
        f"{source}/0/65"]
    assert len(read) == 94 and len({m.id for m in read}) == 94
    by_id = {m.id: m for m in read}
    assert (by_id["c7"].amount, by_id["c7"].kind, by_id["c7"].country, by_id["c7"].legacy) == (
        0.07, "CLICK", "NL", "was")
    assert by_id["c99"].legacy == ""  # written by V2, which has no legacy: proto3's default
    assert by_id["c9"].at.ToDatetime() == datetime(2026, 11, 29)
    rows = {r.key.decode(): r.value.decode() for r in read_topic(kafka_bootstrap, dest)}
    expected = {f"c{o}": "NL" if o % 3 else "-" for o in range(11, 100, 2) if o not in poison}
    assert rows == expected
