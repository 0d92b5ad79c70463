"""The reader schema of a stream whose values are records (``deserializer: avro`` or
``protobuf``).

It comes from the stream's local schema file (``jw.sqe.spout.schema.file``: an Avro ``.avsc``,
or a Protobuf descriptor set), or else from the Schema Registry
(``jw.sqe.spout.schemaRegistry.url``): the subject ``<topic>-value`` (the TopicNameStrategy;
``jw.sqe.spout.schema.subject`` names another) at its latest version when the run starts
(``jw.sqe.spout.schema.version`` pins one), with the schemas a Protobuf schema imports.  A
Protobuf schema's message is ``jw.sqe.spout.schema.message`` (default: the file's first).  Its
fields are the stream's fields, each of the Spark type :func:`sqe.wire.avro.spark_type` or
:func:`sqe.wire.protobuf.spark_type` gives it; each value is read against this schema (an Avro
value with its writer's schema resolved to it), so the queries see one set of columns however
the topic's schema evolves.

    >>> s = ReaderSchema("avro", '{"type": "record", "name": "E", '
    ...                  '"fields": [{"name": "id", "type": "string"}]}', "a file")
    >>> s.struct.fieldNames()
    ['id']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, partial

from pyspark.sql.types import StructType

from sqe.clients.schema_registry import registry
from sqe.config.settings import unless_refused
from sqe.config.views import StreamSettings
from sqe.errors import RegistryError, SchemaError
from sqe.lang.topology import CreateStream, Topology
from sqe.wire import avro, protobuf
from sqe.wire.protobuf_schema import ProtoSchema, read_descriptor_file

__all__ = ["RECORD_FORMATS", "ReaderSchema", "reader_schema", "reader_schemas",
           "registry_form"]

#: The deserializers whose values are records of a schema.
RECORD_FORMATS = ("avro", "protobuf")


def registry_form(kind: str) -> str | None:
    """The form a registry is asked for ``kind``'s schemas in (Protobuf's: serialized)."""
    return "serialized" if kind == "protobuf" else None


@dataclass(frozen=True)
class ReaderSchema:
    """A stream's reader schema: its format, text (a Protobuf schema's: its serialized file,
    base64) and where it came from; ``registry``: the Schema Registry client properties its
    values' writer schemas are looked up with (empty: the values are plain Avro or Protobuf
    binary of this schema); a Protobuf schema's ``message`` (None: the file's first) and the
    files it imports (``references``: import name and text)."""

    kind: str
    text: str
    origin: str
    registry: tuple[tuple[str, str], ...] = ()
    message: str | None = None
    references: tuple[tuple[str, str], ...] = ()

    @property
    def proto(self) -> ProtoSchema:
        """A Protobuf reader schema as :mod:`sqe.wire.protobuf` takes it."""
        return ProtoSchema(self.text, self.references, self.message)

    @property
    def form(self) -> str | None:
        """The form its registry is asked for schemas in (Protobuf's: serialized)."""
        return registry_form(self.kind)

    @cached_property
    def struct(self) -> StructType:
        """The stream's fields as one Spark struct (a schema Spark cannot hold is refused)."""
        if self.kind == "protobuf":
            return protobuf.spark_type(self.proto, self.origin)
        return avro.spark_type(self.text, self.origin)


def reader_schema(kind: str, topic: str, s: StreamSettings, where: str) -> ReaderSchema:
    """The reader schema of a stream of topic ``topic`` with deserializer ``kind``; ``where``
    (file and command) starts a problem's sentence."""
    conf = s.schema_registry
    found = tuple(sorted(conf.items()))
    option = "jw.sqe.spout.schema.file"
    if s.schema_file:
        try:
            if kind == "protobuf":
                p = read_descriptor_file(s.schema_file, option, s.schema_message)
                schema = ReaderSchema(kind, p.file, f"{where}: the schema file {s.schema_file}",
                                      found, p.message, p.references)
            else:
                text, path = avro.read_schema_file(s.schema_file, option)
                schema = ReaderSchema(kind, text, f"{where}: the schema file {path}", found)
        except SchemaError as exc:
            raise SchemaError(f"{where}: {exc}") from None
    elif conf.get("url"):
        subject = s.schema_subject or f"{topic}-value"
        client = registry(conf, registry_form(kind))
        sid, schema_type, text, imports = client.version(subject, s.schema_version)
        if schema_type.upper() != kind.upper():
            raise SchemaError(f"{where}: subject {subject} of the Schema Registry at "
                              f"{client.url} holds a schema of type {schema_type}, not {kind}")
        which = "latest" if s.schema_version is None else f"version {s.schema_version}"
        schema = ReaderSchema(kind, text, f"{where}: subject {subject} ({which}, schema id "
                                          f"{sid})", found, s.schema_message, imports)
    else:
        raise SchemaError(f"{where}: deserializer {kind} needs a reader schema: set "
                          f"jw.sqe.spout.schemaRegistry.url (a Schema Registry) or {option} "
                          f"(a local {'descriptor set' if kind == 'protobuf' else '.avsc file'})")
    _ = schema.struct  # a schema Spark has no columns for is refused here
    return schema


def reader_schemas(topology: Topology, streams: Mapping[str, StreamSettings]
                   ) -> tuple[dict[str, ReaderSchema], list[str]]:
    """The reader schema of each stream of ``topology`` whose values are records, by
    ``streamName``, looked up once for the plan (a registry's latest version is then the same
    for the checks of the queries and for the run), and a located sentence for each stream whose
    schema cannot be had; a stream whose options were refused is left out."""
    found: dict[str, ReaderSchema] = {}
    problems: list[str] = []
    for command in topology.commands:
        if not (isinstance(command, CreateStream) and command.deserializer in RECORD_FORMATS):
            continue
        s = streams.get(command.streamName)
        if s is None:
            continue
        name = command.streamName
        try:
            schema = unless_refused(partial(reader_schema, command.deserializer,
                                            command.objectName, s, f"stream {name}"), None)
        except (SchemaError, RegistryError) as exc:
            problems.append(f"{topology.path}: {topology.label(command)}: {exc}")
            continue
        if schema is not None:
            found[name] = schema
    return found, problems
