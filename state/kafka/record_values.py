"""A Kafka state's values as records (``jw.sqe.state.kafka.serializer: avro`` or ``protobuf``).

On the driver, the first time the state is given its query's output (:func:`with_writer`),
its writer schema is the schema file's (``jw.sqe.state.kafka.schema.file``: an ``.avsc``, or a
Protobuf descriptor set) or derived from the output's Spark types
(:func:`sqe.wire.avro_write.avro_schema`, :func:`sqe.wire.protobuf_write.protobuf_schema`),
named ``jw.sqe.state.kafka.schema.recordName``, default ``sqe.<topic>``.  With a Schema
Registry it is looked up or registered under its subject: ``<topic>-value``
(TopicNameStrategy), the record's or message's full name (``record``) or ``<topic>-<full
name>`` (``topicrecord``), or the subject given.  A registry that refuses it (an incompatible
change under the subject's compatibility rule) stops the run before anything is written, in
one sentence.  The executors' tasks encode each batch's rows with it (:func:`encoder`, one per
process), each value framed with the schema's id (and a Protobuf message's indexes), so a
plain Avro or Protobuf consumer with a registry client reads the topic; keys stay what
``keytype`` makes them (the StreamMetadata key the next hop's replay filter reads).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sqe.clients.schema_registry import registry
from sqe.config.record_schemas import RECORD_FORMATS
from sqe.errors import RegistryError, SchemaError, StateError
from sqe.wire import avro, protobuf
from sqe.wire.avro_write import AvroEncoder, avro_name, avro_schema
from sqe.wire.protobuf_schema import ProtoSchema, descriptor, read_descriptor_file
from sqe.wire.protobuf_write import ProtobufEncoder, protobuf_schema
from state.kafka.config import KafkaStateConfig

__all__ = ["RECORD_SERIALIZERS", "encoder", "subject_of", "with_writer"]

#: The serializers whose values are records of a writer schema: the record formats a stream
#: reads.
RECORD_SERIALIZERS = RECORD_FORMATS
_OPTION = "jw.sqe.state.kafka.schema.file"


def _full_name(schema: str | ProtoSchema) -> str:
    if isinstance(schema, ProtoSchema):
        return str(descriptor(schema).full_name)
    parsed = json.loads(schema)
    name = str(parsed.get("name", ""))
    namespace = parsed.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_of(cfg: KafkaStateConfig, schema: str | ProtoSchema) -> str:
    """The subject writer schema ``schema`` (an Avro schema's text, or a Protobuf schema) is
    registered under (see the module docstring)."""
    if cfg.subject:
        return cfg.subject
    if cfg.subject_strategy == "record":
        return _full_name(schema)
    if cfg.subject_strategy == "topicrecord":
        return f"{cfg.topic}-{_full_name(schema)}"
    return f"{cfg.topic}-value"


def _value_struct(cfg: KafkaStateConfig, frame: DataFrame) -> StructType:
    types = {f.name: f for f in frame.schema.fields}
    return StructType([types[name] for name in cfg.value_fields])


def _from_file(cfg: KafkaStateConfig) -> str | ProtoSchema:
    """The writer schema of the state's schema file, which must hold the query's fields."""
    assert cfg.schema_file is not None
    schema: str | ProtoSchema
    if cfg.serializer == "protobuf":
        schema = read_descriptor_file(cfg.schema_file, _OPTION, cfg.record_name)
        if schema.references:
            raise SchemaError(f"the schema file {cfg.schema_file} imports "
                              f"{', '.join(n for n, _ in schema.references)}: a Kafka state "
                              "writes messages of a self-contained file (well-known types "
                              "aside)")
        where = f"the schema file {cfg.schema_file}"
        fields = protobuf.spark_type(schema, where).fieldNames()
    else:
        text, path = avro.read_schema_file(cfg.schema_file, _OPTION)
        where, schema = f"the schema file {path}", text
        fields = avro.spark_type(text, where).fieldNames()
    if missing := [f for f in cfg.value_fields if f not in fields]:
        raise SchemaError(f"{where} has no field {', '.join(missing)} of the query's output")
    return schema


def with_writer(cfg: KafkaStateConfig, frame: DataFrame) -> KafkaStateConfig:
    """``cfg`` with its writer schema (read or derived, and registered) for the rows of
    ``frame``; unchanged when its values are not records or it has one already."""
    if cfg.serializer not in RECORD_SERIALIZERS or cfg.writer is not None:
        return cfg
    try:
        schema: str | ProtoSchema
        if cfg.schema_file:
            schema = _from_file(cfg)
        elif cfg.serializer == "protobuf":
            schema = protobuf_schema(_value_struct(cfg, frame),
                                     cfg.record_name or f"sqe.{avro_name(cfg.topic)}")
        else:
            schema = avro_schema(_value_struct(cfg, frame),
                                 cfg.record_name or f"sqe.{avro_name(cfg.topic)}")
        sid = None
        if cfg.registry:
            text = schema.file if isinstance(schema, ProtoSchema) else schema
            sid = registry(dict(cfg.registry)).register(subject_of(cfg, schema),
                                                        cfg.serializer.upper(), text)
    except (SchemaError, RegistryError) as exc:
        raise StateError(f"Kafka state {cfg.topic}: {exc}") from None
    return replace(cfg, writer=(sid, schema))


def encoder(cfg: KafkaStateConfig, rows: pa.DataType) -> AvroEncoder | ProtobufEncoder:
    """This process's encoder of ``cfg``'s writer schema for rows of Arrow type ``rows``."""
    assert cfg.writer is not None
    sid, schema = cfg.writer
    return _encoder(sid, schema, rows)


@cache
def _encoder(schema_id: int | None, schema: str | ProtoSchema, rows: pa.DataType
             ) -> AvroEncoder | ProtobufEncoder:
    if isinstance(schema, ProtoSchema):
        return ProtobufEncoder(schema, schema_id, rows)
    return AvroEncoder(schema, schema_id, rows)
