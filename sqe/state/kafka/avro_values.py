"""A Kafka state's values as Avro records (``jw.sqe.state.kafka.serializer: avro``).

On the driver, the first time the state is given its query's output (:func:`with_writer`),
its writer schema is the schema file's (``jw.sqe.state.kafka.schema.file``) or derived from
the output's Spark types (:func:`sqe.wire.avro_write.avro_schema`, named
``jw.sqe.state.kafka.schema.recordName``, default ``sqe.<topic>``), and with a Schema Registry
it is looked up or registered under its subject: ``<topic>-value`` (TopicNameStrategy), the
record's full name (``record``) or ``<topic>-<record full name>`` (``topicrecord``), or the
subject given.  A registry that refuses it (an incompatible change under the subject's
compatibility rule) stops the run before anything is written, in one sentence.  The executors'
tasks encode each batch's rows with it (:func:`encoder`, one per process), each value framed
with the schema's id, so a plain Avro consumer with a registry client reads the topic; keys
stay what ``keytype`` makes them (the StreamMetadata key the next hop's replay filter reads).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sqe.clients.schema_registry import registry
from sqe.errors import RegistryError, SchemaError, StateError
from sqe.state.kafka.config import KafkaStateConfig
from sqe.wire.avro import read_schema_file, spark_type
from sqe.wire.avro_write import AvroEncoder, avro_name, avro_schema

__all__ = ["encoder", "subject_of", "with_writer"]


def _full_name(text: str) -> str:
    schema = json.loads(text)
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_of(cfg: KafkaStateConfig, text: str) -> str:
    """The subject writer schema ``text`` is registered under (see the module docstring)."""
    if cfg.subject:
        return cfg.subject
    if cfg.subject_strategy == "record":
        return _full_name(text)
    if cfg.subject_strategy == "topicrecord":
        return f"{cfg.topic}-{_full_name(text)}"
    return f"{cfg.topic}-value"


def _value_struct(cfg: KafkaStateConfig, frame: DataFrame) -> StructType:
    types = {f.name: f for f in frame.schema.fields}
    return StructType([types[name] for name in cfg.value_fields])


def with_writer(cfg: KafkaStateConfig, frame: DataFrame) -> KafkaStateConfig:
    """``cfg`` with its writer schema (read or derived, and registered) for the rows of
    ``frame``; unchanged when its values are not Avro or it has one already."""
    if cfg.serializer != "avro" or cfg.writer is not None:
        return cfg
    where = f"Kafka state {cfg.topic}"
    try:
        if cfg.schema_file:
            text, path = read_schema_file(cfg.schema_file, "jw.sqe.state.kafka.schema.file")
            missing = [f for f in cfg.value_fields
                       if f not in spark_type(text, f"the schema file {path}").fieldNames()]
            if missing:
                raise SchemaError(f"the schema file {path} has no field "
                                  f"{', '.join(missing)} of the query's output")
        else:
            text = avro_schema(_value_struct(cfg, frame),
                               cfg.record_name or f"sqe.{avro_name(cfg.topic)}")
        sid = None
        if cfg.registry:
            sid = registry(dict(cfg.registry)).register(subject_of(cfg, text), "AVRO", text)
    except (SchemaError, RegistryError) as exc:
        raise StateError(f"{where}: {exc}") from None
    return replace(cfg, writer=(sid, text))


def encoder(cfg: KafkaStateConfig, rows: pa.DataType) -> AvroEncoder:
    """This process's encoder of ``cfg``'s writer schema for rows of Arrow type ``rows``."""
    assert cfg.writer is not None
    sid, text = cfg.writer
    return _encoder(sid, text, rows)


@cache
def _encoder(schema_id: int | None, text: str, rows: pa.DataType) -> AvroEncoder:
    return AvroEncoder(text, schema_id, rows)
