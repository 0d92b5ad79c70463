"""A Kafka state's Avro or Protobuf writer schema: derived from the query's output or read from
a file, registered under the subject of each naming strategy, and a registry's refusal one
sentence."""

from __future__ import annotations

import json

import pytest

from sqe.clients.schema_registry import registry as registry_client
from sqe.errors import StateError
from sqe.wire.protobuf import ProtobufDecoder
from sqe.wire.protobuf_schema import ProtoSchema
from state.kafka.config import KafkaStateConfig
from state.kafka.record_values import encoder, subject_of, with_writer
from support.schema_registry import SchemaRegistry

TEXT = json.dumps({"type": "record", "name": "Click", "namespace": "ads", "fields": []})


@pytest.mark.parametrize("strategy, subject", [
    ("topic", "clicks-value"), ("record", "ads.Click"), ("topicrecord", "clicks-ads.Click")])
def test_each_subject_naming_strategy(strategy, subject):
    cfg = KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id",), serializer="avro",
                           subject_strategy=strategy)
    assert subject_of(cfg, TEXT) == subject
    assert subject_of(KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id",),
                                       subject="mine"), TEXT) == "mine"


@pytest.mark.spark
def test_the_writer_schema_is_registered_once_and_a_refusal_stops_the_run(spark, tmp_path):
    frame = spark.createDataFrame([("a", 1)], "id string, n bigint")
    with SchemaRegistry() as registry:
        cfg = KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id", "n"),
                               serializer="avro", registry=(("url", registry.url),),
                               subject_strategy="record", record_name="ads.Click")
        done = with_writer(cfg, frame)
        assert done.writer is not None and done.writer[0] == 1
        assert json.loads(done.writer[1])["fields"][0] == {"name": "id", "type": ["null",
                                                                                  "string"],
                                                           "default": None}
        assert list(registry.subjects) == ["ads.Click"]
        assert with_writer(done, frame) is done  # once
        registry.incompatible.add("ads.Click")
        wider = spark.createDataFrame([("a", 1, "x")], "id string, n bigint, more string")
        more = KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id", "n", "more"),
                                serializer="avro", registry=(("url", registry.url),),
                                subject_strategy="record", record_name="ads.Click")
        with pytest.raises(StateError) as refused:
            with_writer(more, wider)
    assert str(refused.value).startswith(
        f"Kafka state clicks: the Schema Registry at {registry.url} answered the request when a "
        "schema was registered under ads.Click with HTTP 409")
    schema = tmp_path / "s.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "X", "fields": [
        {"name": "id", "type": "string"}]}))
    with pytest.raises(StateError, match="the schema file .* has no field n of the query's output"):
        with_writer(KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id", "n"),
                                     serializer="avro", schema_file=str(schema)), frame)


@pytest.mark.spark
def test_a_protobuf_writer_schema_is_derived_registered_and_read_back(spark):
    frame = spark.createDataFrame([("a", 1, None), ("b", None, 2.5)],
                                  "id string, n bigint, price double")
    with SchemaRegistry() as registry:
        cfg = KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id", "n", "price"),
                               serializer="protobuf", registry=(("url", registry.url),),
                               subject_strategy="topicrecord", record_name="ads.Click")
        done = with_writer(cfg, frame)
        assert done.writer is not None
        sid, schema = done.writer
        assert isinstance(schema, ProtoSchema) and subject_of(cfg, schema) == "clicks-ads.Click"
        assert list(registry.subjects) == ["clicks-ads.Click"]
        assert registry.schemas[sid] == ("PROTOBUF", schema.file)
        assert with_writer(done, frame) is done
        rows = frame.toArrow().to_struct_array()
        values = encoder(done, rows.type).encode(rows.combine_chunks())
        back = ProtobufDecoder(ProtoSchema(schema.file),
                               registry_client({"url": registry.url}, "serialized").by_id)
        decoded = back.decode(values)
    assert decoded.bad == {}
    assert decoded.values.to_pylist() == [{"id": "a", "n": 1, "price": None},
                                          {"id": "b", "n": None, "price": 2.5}]
    with pytest.raises(StateError, match="Kafka state clicks: .*not a Protobuf message name"):
        with_writer(KafkaStateConfig("clicks", "k:9092", "streammetadata", ("id",),
                                     serializer="protobuf", record_name="ads.9lives"), frame)
