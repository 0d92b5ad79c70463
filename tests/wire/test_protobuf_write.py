"""sqe.wire.protobuf_write: the writer schema of Spark types, as Spark's to_protobuf needs it; a
batch of rows encoded equal to the row-at-a-time reference, and read back as they were, by SQE's
decoder and by confluent-kafka's own deserializer through a Schema Registry."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sqe.errors import SchemaError
from sqe.wire.arrays import binaries
from sqe.wire.arrow_types import arrow_type
from sqe.wire.framing import frame
from sqe.wire.protobuf import ProtobufDecoder, spark_type
from sqe.wire.protobuf_schema import descriptor, file_proto
from sqe.wire.protobuf_write import ProtobufEncoder, encode_reference, protobuf_schema
from support.schema_registry import SchemaRegistry

STRUCT = StructType([
    StructField("id", StringType(), False),
    StructField("n", LongType(), True),
    StructField("ok", BooleanType(), True),
    StructField("ratio", FloatType(), True),
    StructField("score", DoubleType(), False),
    StructField("raw", BinaryType(), True),
    StructField("at", TimestampType(), True),
    StructField("tags", ArrayType(StringType(), True), True),
    StructField("attrs", MapType(StringType(), IntegerType(), True), True),
    StructField("by_n", MapType(LongType(), StructType([StructField("v", StringType())]), False)),
    StructField("geo", StructType([StructField("country", StringType(), True),
                                   StructField("pts", ArrayType(StructType([
                                       StructField("x", DoubleType(), False)]), False))]), True),
])


def test_the_derived_schema_reads_back_as_the_same_spark_types():
    schema = protobuf_schema(STRUCT, "sqe.clicks_out")
    file = file_proto(schema.file, "it")
    assert (file.package, file.syntax, file.message_type[0].name) == ("sqe", "proto3", "clicks_out")
    assert list(file.dependency) == ["google/protobuf/timestamp.proto"]
    fields = {f.name: f for f in file.message_type[0].field}
    assert [f.number for f in file.message_type[0].field] == list(range(1, len(STRUCT) + 1))
    assert fields["n"].proto3_optional and not fields["id"].proto3_optional
    assert not fields["geo"].proto3_optional  # a message has presence of its own
    assert spark_type(schema).simpleString() == STRUCT.simpleString()
    assert schema.message == "sqe.clicks_out" and descriptor(schema).full_name == "sqe.clicks_out"


@pytest.mark.parametrize("struct, says", [
    (StructType([StructField("a", ArrayType(ArrayType(LongType())))]),
     "column a: an array of arrays has no Protobuf type"),
    (StructType([StructField("m", MapType(StringType(), MapType(StringType(), LongType())))]),
     "column m: a map of maps has no Protobuf type"),
    (StructType([StructField("m", MapType(DoubleType(), LongType()))]),
     "column m: a map with double keys has no Protobuf type"),
    (StructType([StructField("s", StructType([StructField("my col", LongType())]))]),
     "column 's.my col' has no Protobuf field name"),
    (StructType([StructField("1st", LongType())]), "column '1st' has no Protobuf field name"),
])
def test_a_type_protobuf_has_none_for_is_refused_naming_the_column(struct, says):
    with pytest.raises(SchemaError, match="column") as refused:
        protobuf_schema(struct, "sqe.x")
    assert says in str(refused.value)


def test_a_message_name_must_be_a_protobuf_name():
    with pytest.raises(SchemaError, match="'sqe.my-out' is not a Protobuf message name"):
        protobuf_schema(STRUCT, "sqe.my-out")


_text = st.text(max_size=4)
_rows = st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "id": _text, "n": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    "ok": st.one_of(st.none(), st.booleans()),
    "ratio": st.one_of(st.none(), st.floats(width=32, allow_nan=False)),
    "score": st.floats(allow_nan=False), "raw": st.one_of(st.none(), st.binary(max_size=3)),
    "at": st.one_of(st.none(), st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31),
                                            timezones=st.just(timezone.utc))),
    "tags": st.one_of(st.none(), st.lists(_text, max_size=3)),
    "attrs": st.one_of(st.none(), st.dictionaries(_text, st.integers(-9, 9), max_size=3)),
    "by_n": st.dictionaries(st.integers(-2**63, 2**63 - 1), st.fixed_dictionaries({
        "v": st.one_of(st.none(), _text)}), max_size=2),
    "geo": st.one_of(st.none(), st.fixed_dictionaries({
        "country": st.one_of(st.none(), _text),
        "pts": st.lists(st.fixed_dictionaries({"x": st.floats(allow_nan=False)}), max_size=2)})),
})), max_size=20)
ARROW = arrow_type(STRUCT)


def _arrow(rows: list) -> pa.Array:
    return pa.array([None if r is None else {
        **r, "attrs": None if r["attrs"] is None else list(r["attrs"].items()),
        "by_n": list(r["by_n"].items())} for r in rows], type=ARROW)


def _as_read(row: dict | None) -> dict | None:
    """A row as it reads back: Protobuf has no NULL array or map."""
    if row is None:
        return None
    return {**row, "tags": row["tags"] or [], "attrs": row["attrs"] or []}


@settings(max_examples=100, deadline=None)
@given(_rows, st.sampled_from([None, 7]), st.integers(0, 3))
def test_a_batch_encodes_as_the_reference_and_reads_back(rows, schema_id, cut):
    schema = protobuf_schema(STRUCT, "sqe.out")
    encoder = ProtobufEncoder(schema, schema_id, ARROW)
    array = _arrow(rows).slice(min(cut, len(rows)))
    got = encoder.encode(array)
    assert got.to_pylist() == encode_reference(encoder, array.to_pylist())
    got.validate(full=True)
    if schema_id is not None:
        assert all(v is None or v[:6] == frame(7, b"\x00") for v in got.to_pylist())
    decoder = ProtobufDecoder(schema, {7: ("PROTOBUF", schema.file)}.get if schema_id else None)
    back = decoder.decode(got)
    assert not back.bad
    want = [_as_read(r) for r in array.to_pylist()]
    read = back.values.to_pylist()
    for r in read:  # maps read back in Protobuf's order
        if r is not None:
            r["attrs"], r["by_n"] = sorted(r["attrs"]), sorted(r["by_n"])
    for r in want:
        if r is not None:
            r["attrs"], r["by_n"] = sorted(r["attrs"]), sorted(r["by_n"])
    assert read == want


def test_types_protobuf_lacks_are_written_as_spark_would_read_them():
    struct = StructType([StructField("b", ByteType()), StructField("s", ShortType()),
                         StructField("d", DateType()), StructField("l", TimestampNTZType()),
                         StructField("m", DecimalType(12, 4)),
                         StructField("tiny", DecimalType(20, 12))])
    schema = protobuf_schema(struct, "sqe.times")
    assert spark_type(schema).simpleString() == (
        "struct<b:int,s:int,d:int,l:timestamp,m:string,tiny:string>")
    rows = [{"b": -3, "s": 300, "d": date(2026, 11, 29), "l": datetime(1960, 1, 1, 0, 0, 0, 1),
             "m": Decimal("-12.5000"), "tiny": Decimal("1E-12")},
            {"b": None, "s": None, "d": None, "l": None, "m": None, "tiny": None}]
    arrow = arrow_type(struct)
    encoder = ProtobufEncoder(schema, None, arrow)
    encoded = encoder.encode(pa.array(rows, type=arrow))
    assert encoded.to_pylist() == encode_reference(encoder, rows)
    assert ProtobufDecoder(schema).decode(encoded).values.to_pylist() == [
        {"b": -3, "s": 300, "d": 20786, "m": "-12.5000", "tiny": "0.000000000001",
         "l": datetime(1960, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)}, dict.fromkeys(rows[1])]


def test_a_null_element_is_refused_in_one_sentence():
    schema = protobuf_schema(STRUCT, "sqe.out")
    encoder = ProtobufEncoder(schema, 7, ARROW)
    row = {"id": "a", "n": None, "ok": None, "ratio": None, "score": 0.0, "raw": None,
           "at": None, "tags": ["x", None], "attrs": None, "by_n": {}, "geo": None}
    says = "column tags holds a NULL element, which a repeated Protobuf field or map cannot carry"
    for encode in (lambda: encoder.encode(_arrow([row])),
                   lambda: encode_reference(encoder, _arrow([row]).to_pylist())):
        with pytest.raises(SchemaError, match=says):
            encode()
    fine = _arrow([None, row]).slice(0, 1)  # the element is in a row not encoded
    assert encoder.encode(fine).to_pylist() == [None]


def test_a_column_the_message_lacks_is_refused():
    schema = protobuf_schema(StructType([StructField("a", LongType())]), "sqe.x")
    with pytest.raises(SchemaError, match="the rows' column b is not a field of the writer "
                                          "schema's message sqe.x"):
        ProtobufEncoder(schema, None, pa.struct([("b", pa.int64())]))


def test_confluent_kafkas_serializer_and_deserializer_agree_through_a_registry():
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import message_factory

    schema = protobuf_schema(STRUCT, "sqe.out")
    cls = message_factory.GetMessageClass(descriptor(schema))
    row = {"id": "a", "n": 5, "ok": None, "ratio": 0.5, "score": 2.0, "raw": b"r",
           "at": datetime(2026, 1, 2, 3, 4, 5, 6, timezone.utc), "tags": ["t"],
           "attrs": {"k": 1}, "by_n": {9: {"v": "nine"}}, "geo": {"country": "PL", "pts": []}}
    context = SerializationContext("events", MessageField.VALUE)
    with SchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        serializer = ProtobufSerializer(cls, client)
        theirs = serializer(cls(**{**row, "at": {"seconds": 1767323045, "nanos": 6000}}), context)
        sid = int.from_bytes(theirs[1:5], "big")
        kind, text = registry.schemas[sid]
        assert (kind, text) == ("PROTOBUF", schema.file)

        def writers(i: int) -> tuple[str, str]:
            found = client.get_schema(i, fmt="serialized")
            return found.schema_type, found.schema_str

        (read,) = ProtobufDecoder(schema, writers).decode(binaries([theirs])).values.to_pylist()
        assert read == {**row, "attrs": [("k", 1)], "by_n": [(9, {"v": "nine"})]}
        assert client.get_version("events-value", 1, fmt="serialized").schema.schema_str == text
        assert f"GET /schemas/ids/{sid}?format=serialized" in registry.requests

        other = client.register_schema("out-value", Schema(schema.file, "PROTOBUF"))
        ours = ProtobufEncoder(schema, other, ARROW).encode(_arrow([{**row, "attrs": row["attrs"],
                                                                      "by_n": row["by_n"]}]))
        message = ProtobufDeserializer(cls, {}, client)(ours[0].as_py(), context)
        assert (message.id, message.n, list(message.tags), message.geo.country) == (
            "a", 5, ["t"], "PL")
        assert message.at.seconds == 1767323045 and not message.HasField("ok")
