"""sqe.wire.avro and sqe.wire.framing: a reader schema's Spark type, as Spark's from_avro maps
it; a batch decoded equal to the value-at-a-time reference over generated values, poison
included; the wire format's header read from the buffers equal to its reference."""

from __future__ import annotations

import io
import json
from datetime import date, datetime, timezone
from decimal import Decimal

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.errors import SchemaError
from sqe.wire.arrays import binaries
from sqe.wire.avro import AvroDecoder, decode_reference, spark_type
from sqe.wire.framing import frame, header_reference, headers


def _record(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "R", "namespace": "t", "fields": list(fields)})


def _encode(schema: str, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(schema)), record)
    return out.getvalue()


@pytest.mark.parametrize("avro, spark", [
    ("boolean", "boolean"), ("int", "int"), ("long", "bigint"), ("float", "float"),
    ("double", "double"), ("bytes", "binary"), ("string", "string"),
    ({"type": "int", "logicalType": "date"}, "date"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp"),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp_ntz"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}, "decimal(12,3)"),
    ({"type": "fixed", "name": "F", "size": 8, "logicalType": "decimal", "precision": 18,
      "scale": 0}, "decimal(18,0)"),
    ({"type": "string", "logicalType": "uuid"}, "string"),
    ({"type": "int", "logicalType": "time-millis"}, "int"),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, "string"),
    ({"type": "fixed", "name": "G", "size": 4}, "binary"),
    ({"type": "array", "items": ["null", "long"]}, "array<bigint>"),
    ({"type": "map", "values": "double"}, "map<string,double>"),
    (["null", "string"], "string"),
    (["int", "long"], "bigint"),
    (["null", "float", "double"], "double"),
    ({"type": "record", "name": "In", "fields": [{"name": "a", "type": "int"}]},
     "struct<a:int>"),
])
def test_each_avro_type_maps_as_spark_maps_it(avro, spark):
    struct = spark_type(_record({"name": "f", "type": avro}))
    assert struct.fields[0].dataType.simpleString() == spark
    assert struct.fields[0].nullable == (isinstance(avro, list) and "null" in avro)


@pytest.mark.parametrize("schema, says", [
    (_record({"name": "u", "type": ["string", "long"]}),
     "field u: a union of string, bigint: SQE reads a union of one type with null"),
    (_record({"name": "next", "type": ["null", "t.R"]}),
     "field next: the record t.R holds itself"),
    (_record({"name": "x", "type": "Nope"}), "field x: unknown type 'Nope'"),
    ('"string"', 'is a "string", not a record'),
    ("{not json", "is not an Avro schema (not JSON"),
])
def test_a_schema_spark_has_no_columns_for_is_refused_naming_the_field(schema, says):
    with pytest.raises(SchemaError, match="the schema") as refused:
        spark_type(schema, "the schema")
    assert says in str(refused.value)


def test_logical_types_decode_to_their_spark_values():
    schema = _record(
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "m", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                               "scale": 2}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "k", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}})
    record = {"d": date(2026, 11, 29), "t": datetime(2026, 11, 29, 1, 2, 3, 4, timezone.utc),
              "m": Decimal("12.34"), "u": "6f1c2b9e-0a4e-4a8e-9d3c-1b2a3c4d5e6f", "k": "B"}
    decoder = AvroDecoder(schema)
    (got,) = decoder.decode(binaries([_encode(schema, record)])).values.to_pylist()
    assert got == record


WRITER = _record({"name": "id", "type": "string"}, {"name": "n", "type": "long"},
                 {"name": "gone", "type": "string"})
READER = _record({"name": "id", "type": "string"}, {"name": "n", "type": "long"},
                 {"name": "added", "type": ["null", "string"], "default": None})
OTHER = _record({"name": "id", "type": "long"})  # id as a long: cannot be read as a string
_SCHEMAS = {1: ("AVRO", READER), 2: ("AVRO", WRITER), 3: ("AVRO", OTHER),
            4: ("PROTOBUF", "syntax = 'proto3';")}

_values = st.one_of(
    st.none(),
    st.binary(max_size=12),  # poison: short, wrong magic, or garbage after a header
    st.builds(lambda sid, body: frame(sid, body), st.integers(0, 6), st.binary(max_size=8)),
    st.builds(lambda i, n: frame(1, _encode(READER, {"id": i, "n": n, "added": None})),
              st.text(max_size=5), st.integers(-2**63, 2**63 - 1)),
    st.builds(lambda i, n: frame(2, _encode(WRITER, {"id": i, "n": n, "gone": "x"})),
              st.text(max_size=5), st.integers(-2**63, 2**63 - 1)),
    st.builds(lambda n: frame(3, _encode(OTHER, {"id": n})), st.integers(0, 9)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_values, max_size=25))
def test_a_batch_decodes_as_the_value_at_a_time_reference(values):
    decoder = AvroDecoder(READER, _SCHEMAS.get)
    got = decoder.decode(binaries(values))
    want, bad = decode_reference(decoder, values)
    assert got.bad == bad
    assert got.values.to_pylist() == want
    got.values.validate(full=True)
    for i, value in enumerate(values):
        if value is not None and value[:1] == b"\x00" and len(value) >= 5 and i not in bad:
            assert want[i] is not None  # a framed value either decodes or has its reason


def test_each_poison_value_says_why():
    decoder = AvroDecoder(READER, _SCHEMAS.get)
    values = [frame(9, b"x"), frame(4, b"x"), frame(3, _encode(OTHER, {"id": 1})),
              frame(1, _encode(READER, {"id": "a", "n": 1, "added": None}) + b"!"), b"\x01abcd"]
    assert decoder.decode(binaries(values)).bad == {
        0: "schema id 9 is not in the schema registry",
        1: "schema id 4 is a schema of type PROTOBUF, not Avro",
        2: "the value (schema id 3) cannot be read as the reader schema: "
           + decode_reference(decoder, values[2:3])[1][0].split("reader schema: ")[1],
        3: "the value (schema id 1) does not decode as Avro: 1 byte is left after the record",
        4: "the value is not in the Confluent wire format: its first byte is 0x01, not the "
           "magic byte 0x00"}


def test_without_a_registry_values_are_plain_avro_of_the_reader_schema():
    decoder = AvroDecoder(READER)
    value = _encode(READER, {"id": "a", "n": 2, "added": "y"})
    got = decoder.decode(binaries([value, None, b"\x02"]))
    assert got.values.to_pylist()[:2] == [{"id": "a", "n": 2, "added": "y"}, None]
    assert list(got.bad) == [2]


@given(st.lists(st.one_of(st.none(), st.binary(max_size=9)), max_size=40), st.integers(0, 5))
def test_headers_read_from_the_buffers_equal_the_reference(values, cut):
    array = binaries(values).slice(min(cut, len(values)))
    ids, problems = headers(array)
    want = [header_reference(v) for v in array.to_pylist()]
    assert list(zip(ids.tolist(), problems.tolist(), strict=True)) == want


def test_the_arrow_type_of_each_column_is_pysparks_own():
    from sqe.wire.arrow_types import arrow_type
    from tests.support.arrow import pyspark_arrow_type

    schema = _record(*[{"name": f"f{i}", "type": t} for i, t in enumerate([
        "boolean", "int", "long", "float", "double", "bytes", "string", "null",
        {"type": "int", "logicalType": "date"},
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "long", "logicalType": "local-timestamp-micros"},
        {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4},
        {"type": "array", "items": ["null", "string"]},
        {"type": "map", "values": {"type": "record", "name": "V", "fields": [
            {"name": "x", "type": ["null", "long"]}]}},
        ["null", {"type": "record", "name": "N", "fields": [{"name": "y", "type": "int"}]}]])])
    struct = spark_type(schema)
    assert arrow_type(struct) == pyspark_arrow_type(struct)
    from pyspark.sql.types import ByteType, ShortType  # what a hop's rows may hold besides
    assert [arrow_type(t) for t in (ByteType(), ShortType())] == [
        pyspark_arrow_type(t) for t in (ByteType(), ShortType())]
