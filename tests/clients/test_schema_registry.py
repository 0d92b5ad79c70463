"""sqe.clients.schema_registry against a registry speaking the REST API over HTTP: lookups,
registration, basic auth, and one sentence for a registry that refuses, fails or is away,
with no credential in it."""

from __future__ import annotations

import json
import socket

import pytest

from sqe.clients.schema_registry import Registry, registry
from sqe.errors import RegistryError, SchemaError
from support.schema_registry import SchemaRegistry

SCHEMA = json.dumps({"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}]})


def test_register_look_up_and_read_back_by_id_and_version():
    with SchemaRegistry(user="sqe", password="hunter2") as server:
        client = Registry({"url": server.url, "basic.auth.user.info": "sqe:hunter2"})
        sid = client.register("events-value", "AVRO", SCHEMA)
        assert client.register("events-value", "AVRO", SCHEMA) == sid  # looked up, kept
        assert client.by_id(sid) == ("AVRO", SCHEMA)
        assert client.by_id(sid + 5) is None
        assert client.version("events-value", None) == (sid, "AVRO", SCHEMA, ())
        newer = SCHEMA.replace('"E"', '"F"')
        server.register("events-value", newer)
        assert client.version("events-value", None)[2] == newer  # the latest as it is now
        assert client.version("events-value", 1)[2] == SCHEMA
        with pytest.raises(SchemaError, match="has no subject other-value with its latest"):
            client.version("other-value", None)


def test_a_refusal_a_failure_and_a_registry_away_are_one_sentence_without_secrets():
    with SchemaRegistry(user="sqe", password="hunter2") as server:
        wrong = Registry({"url": server.url, "basic.auth.user.info": "sqe:letmein"})
        with pytest.raises(RegistryError) as refused:
            wrong.by_id(1)
        assert f"the Schema Registry at {server.url} answered the request for schema id 1 " \
               "with HTTP 401" in str(refused.value)
        server.fail_next(10)
        failing = Registry({"url": server.url, "basic.auth.user.info": "sqe:hunter2",
                            "max.retries": 1, "retries.wait.ms": 1})
        with pytest.raises(RegistryError, match="HTTP 500 .error 50001: store failed"):
            failing.by_id(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    away = Registry({"url": f"http://sqe:hunter2@127.0.0.1:{port}", "max.retries": 0})
    with pytest.raises(RegistryError) as unreachable:
        away.by_id(1)
    text = str(unreachable.value)
    assert text.startswith(f"cannot reach the Schema Registry at http://sqe:***@127.0.0.1:{port}")
    for said in (str(refused.value), text):
        assert "hunter2" not in said and "letmein" not in said and "\n" not in said


def test_a_process_keeps_one_client_per_configuration():
    conf = {"url": "http://127.0.0.1:1"}
    assert registry(conf) is registry(dict(conf))
    assert registry(conf) is not registry({**conf, "timeout": "5"})


def test_a_protobuf_subject_comes_with_the_schemas_it_imports(tmp_path):
    from google.protobuf import descriptor_pb2, text_format

    from sqe.config.record_schemas import ReaderSchema
    from sqe.wire.protobuf_schema import ProtoSchema

    def proto(text):
        return ProtoSchema.of(text_format.Parse(text, descriptor_pb2.FileDescriptorProto())).file

    geo = proto('name: "ads/geo.proto" package: "ads" syntax: "proto3" message_type { '
                'name: "Geo" field { name: "country" number: 1 type: TYPE_STRING '
                'label: LABEL_OPTIONAL } }')
    click = proto('name: "ads/click.proto" package: "ads" syntax: "proto3" '
                  'dependency: "ads/geo.proto" message_type { name: "Click" field { name: "geo" '
                  'number: 1 type: TYPE_MESSAGE label: LABEL_OPTIONAL type_name: ".ads.Geo" } }')
    with SchemaRegistry() as server:
        server.register("ads/geo.proto", geo, "PROTOBUF")
        sid = server.register("clicks-value", click, "PROTOBUF", references=[
            {"name": "ads/geo.proto", "subject": "ads/geo.proto", "version": 1}])
        found = registry({"url": server.url}, "serialized").version("clicks-value", None)
    assert found == (sid, "PROTOBUF", click, (("ads/geo.proto", geo),))
    schema = ReaderSchema("protobuf", click, "subject clicks-value", (), None, found[3])
    assert schema.struct.simpleString() == "struct<geo:struct<country:string>>"
