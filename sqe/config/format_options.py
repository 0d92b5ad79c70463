"""The options of record formats: the Schema Registry a stream reads with and a Kafka state
writes with (confluent-kafka's own client property names), a stream's reader schema and a
state's serializer and writer schema (:mod:`sqe.config.record_schemas`,
:mod:`state.kafka.record_values`); declared here, part of the registry
(:data:`sqe.config.registry.REGISTRY`)."""

from __future__ import annotations

from sqe.clients.schema_registry import INT_PROPERTIES, PROPERTIES
from sqe.config.options import Option, Scope
from sqe.secrets import is_secret_key

__all__ = ["SPOUT_FORMAT_OPTIONS", "SPOUT_REGISTRY", "STATE_FORMAT_OPTIONS", "STATE_REGISTRY"]

SPOUT_REGISTRY = "jw.sqe.spout.schemaRegistry"
STATE_REGISTRY = "jw.sqe.state.kafka.schemaRegistry"


def _schema_registry(prefix: str, what: str, scope: Scope) -> list[Option]:
    """The Schema Registry client properties of ``what`` (confluent-kafka's own names)."""
    docs = {
        "url": f"The Schema Registry {what} uses (http:// or https://; several, comma-separated, "
               "are tried in turn).",
        "basic.auth.user.info": "user:password for the registry's HTTP basic auth; write "
                                "${ENV_VAR} rather than the password itself.",
        "basic.auth.credentials.source": "Where basic auth comes from: USER_INFO (the default "
                                         "with basic.auth.user.info) or URL (user:password@ in "
                                         "the url).",
        "ssl.ca.location": "CA certificate file that signed the registry's TLS certificate.",
        "ssl.certificate.location": "Client certificate file, for a registry that verifies "
                                    "clients.",
        "ssl.key.location": "Private key file of the client certificate.",
        "ssl.key.password": "Password of the client certificate's private key.",
        "timeout": "Seconds one registry request may take.",
        "max.retries": "Times a failed registry request is sent again.",
        "retries.wait.ms": "Milliseconds before the first retry of a registry request.",
        "retries.max.wait.ms": "The longest wait between retries of a registry request.",
    }
    return [Option(f"{prefix}.{name}", "int" if name in INT_PROPERTIES else "str", None, doc,
                   scope=scope, secret=is_secret_key(name),
                   minimum=0 if name in INT_PROPERTIES else None)
            for name, doc in ((name, docs[name]) for name in PROPERTIES)]


#: A stream's reader schema and its registry.
SPOUT_FORMAT_OPTIONS: list[Option] = [
    *_schema_registry(SPOUT_REGISTRY, "a stream with deserializer avro or protobuf", "stream"),
    Option("jw.sqe.spout.schema.file", "str", None,
           "A local reader schema: an Avro schema file (.avsc) for deserializer avro, a "
           "descriptor set (protoc --include_imports --descriptor_set_out) for protobuf.  With "
           "a Schema Registry, values are read by the schema id in each value (an Avro value "
           "with its writer's schema, resolved to this one); without one, values are plain "
           "binary of this schema.", scope="stream"),
    Option("jw.sqe.spout.schema.message", "str", None,
           "The Protobuf message a stream with deserializer protobuf reads, by its full name "
           "(package.Message; default: the schema file's first message).", scope="stream"),
    Option("jw.sqe.spout.schema.subject", "str", None,
           "The registry subject whose schema is the reader schema (default <topic>-value, "
           "the TopicNameStrategy).", scope="stream"),
    Option("jw.sqe.spout.schema.version", "int", None,
           "The subject's version to read as (default: its latest when the run starts).",
           scope="stream", minimum=1),
]

#: A Kafka state's serializer, writer schema and its registry.
STATE_FORMAT_OPTIONS: list[Option] = [
    Option("jw.sqe.state.kafka.serializer", "choice", "json",
           "Record values: json (the single field as it is, or a JSON object of the fields), "
           "avro or protobuf (a record or message of the fields, in the Confluent wire format "
           "with its schema id when a Schema Registry is set, plain binary otherwise).",
           scope="state", choices=("json", "avro", "protobuf")),
    *_schema_registry(STATE_REGISTRY, "a Kafka state with serializer avro or protobuf",
                      "state"),
    Option("jw.sqe.state.kafka.schema.file", "str", None,
           "The writer schema of serializer avro (.avsc) or protobuf (a descriptor set); "
           "default: one derived from the query's output types, as Spark's to_avro derives it "
           "(nullable fields as [\"null\", type] with default null) or, for protobuf, a proto3 "
           "message of them (nullable fields optional).", scope="state"),
    Option("jw.sqe.state.kafka.schema.subjectStrategy", "choice", "topic",
           "The subject the writer schema is registered under: topic (<topic>-value, "
           "TopicNameStrategy), record (the record's full name, RecordNameStrategy) or "
           "topicrecord (<topic>-<record full name>).", scope="state",
           choices=("topic", "record", "topicrecord")),
    Option("jw.sqe.state.kafka.schema.subject", "str", None,
           "The subject to register under, instead of the strategy's.", scope="state"),
    Option("jw.sqe.state.kafka.schema.recordName", "str", None,
           "The derived writer schema's full name (namespace.Name; default sqe.<topic>); with "
           "protobuf and a schema file, the message to write.",
           scope="state"),
]
