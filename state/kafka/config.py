"""What one query's Kafka state is configured with: the topic, its keys, its partitioner and its
chunks, as each executor task is sent them (:class:`KafkaStateConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqe.clients.kafka import producer_conf
from sqe.wire.chunk.codec import Codec
from sqe.wire.protobuf_schema import ProtoSchema
from state.sink import SinkTarget

__all__ = ["KafkaStateConfig"]


@dataclass(frozen=True)
class KafkaStateConfig:
    """Where and how one query writes to Kafka (what each task is sent)."""

    topic: str
    brokers: str
    keytype: str  # streammetadata | messagehash | field
    fields: tuple[str, ...]
    partitioner: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # producer properties
    chunking: bool = False
    chunk_messages: int = 1000
    chunk_bytes: int = 1 << 20
    chunk_codec: Codec = "none"
    filter_size: int = 16
    #: The partition count the partitioner spreads over (the layout's); None: the topic's
    #: count as each task finds it.
    partitions: int | None = None
    #: Values as Avro records or Protobuf messages (:mod:`state.kafka.record_values`), and
    #: how their schema is found and registered: the registry's client properties, a schema
    #: file, the subject strategy, a subject, a record name
    serializer: str = "json"
    registry: tuple[tuple[str, str], ...] = ()
    schema_file: str | None = None
    subject_strategy: str = "topic"
    subject: str | None = None
    record_name: str | None = None
    #: The writer schema (its id, None without a registry, and an Avro schema's text or a
    #: Protobuf schema), once the driver derived or read it and registered it
    #: (:func:`state.kafka.record_values.with_writer`)
    writer: tuple[int | None, str | ProtoSchema] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "keytype", self.keytype.lower())

    @classmethod
    def of(cls, target: SinkTarget) -> KafkaStateConfig:
        """The config of a query's Kafka state."""
        s = target.settings.kafka
        return cls(topic=target.name, brokers=s.bootstrap, keytype=s.keytype,
                   fields=target.fields, partitioner=s.partitioner,
                   extra=tuple(sorted(s.producer_properties.items())), chunking=s.chunking,
                   chunk_messages=s.chunk_messages, chunk_bytes=s.chunk_bytes,
                   chunk_codec=s.chunk_codec, filter_size=s.filter_size,
                   serializer=s.serializer, registry=tuple(s.schema_registry.items()),
                   schema_file=s.schema_file, subject_strategy=s.subject_strategy,
                   subject=s.subject, record_name=s.record_name)

    @property
    def value_fields(self) -> tuple[str, ...]:
        """The fields a value holds (keytype field: all but the first, the key)."""
        return self.fields[1:] if self.keytype == "field" else self.fields

    @property
    def role(self) -> str:
        """The state's producer in messages and the client log."""
        return f"Kafka state {self.topic}"

    def producer_settings(self) -> dict[str, Any]:
        """The settings of the producer each task writes with (the executor process's own,
        :func:`sqe.clients.producers.shared_sender`)."""
        conf = producer_conf(self.brokers, dict(self.extra))
        conf.setdefault("partitioner", "murmur2_random")
        return conf
