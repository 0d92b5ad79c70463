"""sqe.wire.protobuf, sqe.wire.protobuf_schema and the message indexes of sqe.wire.framing: a
message's Spark type, as Spark's from_protobuf maps it; a batch decoded equal to the
value-at-a-time reference over generated values, poison included; evolution by protobuf's rules;
schemas from the registry's serialized form and from descriptor-set files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest
from google.protobuf import descriptor_pb2, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.errors import SchemaError
from sqe.wire.arrays import binaries
from sqe.wire.arrow_types import arrow_type
from sqe.wire.framing import first_message, frame, headers, index_bytes, message_indexes
from sqe.wire.protobuf import ProtobufDecoder, ProtoSchema, decode_reference, read_descriptor_file, spark_type
from sqe.wire.protobuf_schema import descriptor
from tests.support.arrow import pyspark_arrow_type

F = descriptor_pb2.FieldDescriptorProto
TIMESTAMP, WRAPPERS = "google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"


def _field(name: str, number: int, kind: int, label: int = F.LABEL_OPTIONAL,
           type_name: str = "", optional: bool = False) -> F:
    field = F(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if optional:
        field.proto3_optional = True
    return field


def _message(name: str, *fields: F, nested: tuple = (), enums: tuple = ()
             ) -> descriptor_pb2.DescriptorProto:
    m = descriptor_pb2.DescriptorProto(name=name, nested_type=list(nested), enum_type=list(enums))
    for f in fields:
        if f.proto3_optional:
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{f.name}")
        m.field.append(f)
    return m


def _file(*messages: descriptor_pb2.DescriptorProto, name: str = "t.proto",
          deps: tuple[str, ...] = (TIMESTAMP, WRAPPERS), syntax: str = "proto3"
          ) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(name=name, package="t", syntax=syntax,
                                              dependency=list(deps), message_type=list(messages))


def _entry(name: str, key: int, value: int, type_name: str = "") -> descriptor_pb2.DescriptorProto:
    m = _message(name, _field("key", 1, key), _field("value", 2, value, type_name=type_name))
    m.options.map_entry = True
    return m


KIND = descriptor_pb2.EnumDescriptorProto(name="Kind", value=[
    descriptor_pb2.EnumValueDescriptorProto(name="NONE", number=0),
    descriptor_pb2.EnumValueDescriptorProto(name="CLICK", number=1)])


def _class(schema: ProtoSchema) -> type:
    return message_factory.GetMessageClass(descriptor(schema))


@pytest.mark.parametrize("field, spark, nullable_ever", [
    (_field("f", 1, F.TYPE_INT32), "int", False), (_field("f", 1, F.TYPE_SINT32), "int", False),
    (_field("f", 1, F.TYPE_SFIXED32), "int", False), (_field("f", 1, F.TYPE_UINT32), "int", False),
    (_field("f", 1, F.TYPE_FIXED32), "int", False), (_field("f", 1, F.TYPE_INT64), "bigint", False),
    (_field("f", 1, F.TYPE_SINT64), "bigint", False),
    (_field("f", 1, F.TYPE_SFIXED64), "bigint", False),
    (_field("f", 1, F.TYPE_UINT64), "bigint", False),
    (_field("f", 1, F.TYPE_FIXED64), "bigint", False), (_field("f", 1, F.TYPE_FLOAT), "float", False),
    (_field("f", 1, F.TYPE_DOUBLE), "double", False), (_field("f", 1, F.TYPE_BOOL), "boolean", False),
    (_field("f", 1, F.TYPE_STRING), "string", False), (_field("f", 1, F.TYPE_BYTES), "binary", False),
    (_field("f", 1, F.TYPE_STRING, optional=True), "string", True),
    (_field("f", 1, F.TYPE_ENUM, type_name=".t.R.Kind"), "string", False),
    (_field("f", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"), "timestamp", True),
    (_field("f", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Int32Value"), "int", True),
    (_field("f", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.StringValue"), "string", True),
    (_field("f", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.UInt64Value"), "bigint", True),
    (_field("f", 1, F.TYPE_MESSAGE, type_name=".t.R.In"), "struct<y:int>", True),
    (_field("f", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".t.R.In"), "array<struct<y:int>>", False),
    (_field("f", 1, F.TYPE_INT64, F.LABEL_REPEATED), "array<bigint>", False),
    (_field("f", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".t.R.FEntry"), "map<string,bigint>", False),
])
def test_each_protobuf_type_maps_as_spark_maps_it(field, spark, nullable_ever):
    reader = _message("R", field, nested=(_message("In", _field("y", 1, F.TYPE_INT32)),
                                          _entry("FEntry", F.TYPE_STRING, F.TYPE_INT64)),
                      enums=(KIND,))
    schema = ProtoSchema.of(_file(reader))
    struct = spark_type(schema)
    assert struct.fields[0].dataType.simpleString() == spark
    assert struct.fields[0].nullable  # Spark makes every non-required column nullable
    (unset,) = ProtobufDecoder(schema).decode(binaries([b""])).values.to_pylist()
    assert (unset["f"] is None) == nullable_ever  # only a field with presence is ever NULL


def test_a_proto2_required_field_is_not_nullable():
    schema = ProtoSchema.of(_file(_message("R", _field("f", 1, F.TYPE_INT32, F.LABEL_REQUIRED)),
                                  syntax="proto2", deps=()))
    assert not spark_type(schema).fields[0].nullable


@pytest.mark.parametrize("file, message, says", [
    (_file(_message("R", _field("next", 1, F.TYPE_MESSAGE, type_name=".t.R"))), None,
     "field next: the message t.R holds itself"),
    (_file(_message("R", _field("a", 1, F.TYPE_MESSAGE, type_name=".t.A")),
           _message("A", _field("b", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".t.R"))), "t.R",
     "field a.b: the message t.R holds itself"),
    (_file(_message("R", _field("d", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Duration")),
           deps=("google/protobuf/duration.proto",)), None,
     "field d: a google.protobuf.Duration is Spark's DayTimeIntervalType"),
    (_file(_message("R"), deps=("x/missing.proto",)), None,
     "t.proto imports x/missing.proto, which is neither among its references nor a well-known"),
    (_file(_message("R")), "t.Nope", "has no message t.Nope (t.proto holds t.R)"),
    (_file(_message("R", _field("f", 1, F.TYPE_MESSAGE, type_name=".t.Gone"))), None,
     "t.proto does not build"),
])
def test_a_schema_spark_has_no_columns_for_is_refused_saying_where(file, message, says):
    with pytest.raises(SchemaError, match="the schema") as refused:
        spark_type(ProtoSchema.of(file, (), message), "the schema")
    assert says in str(refused.value)


@pytest.mark.parametrize("text, says", [
    ("syntax = 'proto3';", "is not a serialized Protobuf schema (a FileDescriptorProto in base64"),
    ("/w==", "is not a serialized Protobuf schema"),
])
def test_a_text_that_is_no_serialized_descriptor_is_refused(text, says):
    with pytest.raises(SchemaError, match="the schema") as refused:
        spark_type(ProtoSchema(text), "the schema")
    assert says in str(refused.value)


# The reader: t.Event, the second message of its file ([1]); the writer (id 2): t.Event first
# ([0], the single byte 0), with a field the reader lacks (gone) and without one it has (added).
INNER = _message("Inner", _field("y", 1, F.TYPE_INT32))
_EVENT = (_field("id", 1, F.TYPE_STRING), _field("n", 2, F.TYPE_INT64),
          _field("ts", 4, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"),
          _field("kind", 5, F.TYPE_ENUM, type_name=".t.Kind"),
          _field("tags", 6, F.TYPE_STRING, F.LABEL_REPEATED),
          _field("attrs", 7, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".t.Event.AttrsEntry"),
          _field("inner", 8, F.TYPE_MESSAGE, type_name=".t.Event.Inner"),
          _field("w", 9, F.TYPE_MESSAGE, type_name=".google.protobuf.Int32Value"),
          _field("u", 10, F.TYPE_UINT32), _field("f", 11, F.TYPE_FLOAT))
_NESTED = (INNER, _entry("AttrsEntry", F.TYPE_STRING, F.TYPE_INT32))  # [1, 0]: t.Event.Inner
READER_FILE = _file(_message("Other", _field("x", 1, F.TYPE_INT64)),
                    _message("Event", *_EVENT, _field("added", 3, F.TYPE_STRING, optional=True),
                             nested=_NESTED))
READER_FILE.enum_type.append(KIND)
WRITER_FILE = _file(_message("Event", *_EVENT, _field("gone", 12, F.TYPE_STRING), nested=_NESTED),
                    name="w.proto")
WRITER_FILE.enum_type.append(KIND)
READER = ProtoSchema.of(READER_FILE, (), "t.Event")
WRITER = ProtoSchema.of(WRITER_FILE, (), "t.Event")
Reader, Writer, Other = _class(READER), _class(WRITER), _class(ProtoSchema.of(READER_FILE))
_SCHEMAS = {1: ("PROTOBUF", READER.file), 2: ("PROTOBUF", WRITER.file), 3: ("AVRO", '"long"'),
            4: ("PROTOBUF", "syntax = 'proto3';")}

_event = st.fixed_dictionaries({
    "id": st.text(max_size=4), "n": st.integers(-2**63, 2**63 - 1),
    "ts": st.one_of(st.none(), st.fixed_dictionaries({
        "seconds": st.integers(-2**40, 2**40), "nanos": st.integers(0, 999_999_999)})),
    "kind": st.integers(0, 3), "tags": st.lists(st.text(max_size=3), max_size=3),
    "attrs": st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=3),
    "inner": st.one_of(st.none(), st.builds(dict, y=st.integers(-2**31, 2**31 - 1))),
    "w": st.one_of(st.none(), st.builds(dict, value=st.integers(-2**31, 2**31 - 1))),
    "u": st.integers(0, 2**32 - 1), "f": st.floats(width=32, allow_nan=False)})


def _indexes(indexes: list[int], payload: bytes, sid: int = 1) -> bytes:
    return frame(sid, index_bytes(indexes) + payload)


_values = st.one_of(
    st.none(),
    st.binary(max_size=12),  # poison: short, wrong magic, or garbage after a header
    st.builds(lambda sid, body: frame(sid, body), st.integers(0, 5), st.binary(max_size=8)),
    st.builds(lambda e, a: _indexes([1], Reader(**e, added=a).SerializeToString()), _event,
              st.one_of(st.none(), st.text(max_size=3))),
    st.builds(lambda e, g: _indexes([0], Writer(**e, gone=g).SerializeToString(), 2), _event,
              st.text(max_size=3)),
    st.builds(lambda e: frame(2, b"\x02\x00" + Writer(**e).SerializeToString()), _event),  # [0]
    st.builds(lambda x: _indexes([0], Other(x=x).SerializeToString()), st.integers(0, 9)),
    st.builds(lambda ix, body: _indexes(ix, body), st.lists(st.integers(-2, 3), max_size=3),
              st.binary(max_size=4)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_values, max_size=25))
def test_a_batch_decodes_as_the_value_at_a_time_reference(values):
    decoder = ProtobufDecoder(READER, _SCHEMAS.get)
    got = decoder.decode(binaries(values))
    want, bad = decode_reference(decoder, values)
    assert got.bad == bad
    assert got.values.to_pylist() == want
    got.values.validate(full=True)
    assert all(want[i] is None for i in bad)
    assert all(want[i] is not None for i, v in enumerate(values) if v is not None and i not in bad)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=10), _values.filter(bool)), max_size=20))
def test_plain_messages_without_a_registry_decode_as_the_reference(values):
    decoder = ProtobufDecoder(READER)
    plain = [v if v is None or v[:1] != b"\x00" else v[5:] for v in values]
    got = decoder.decode(binaries(plain))
    want, bad = decode_reference(decoder, plain)
    assert (got.values.to_pylist(), got.bad) == (want, bad)


def test_each_poison_value_says_why():
    decoder = ProtobufDecoder(READER, _SCHEMAS.get)
    good = Reader(id="a").SerializeToString()
    values = [frame(9, b"\x00"), frame(3, b"\x00"), frame(4, b"\x00"),
              _indexes([0], good), _indexes([1, 0], good), _indexes([5], good),
              frame(1, b""), frame(1, b"\x02"), _indexes([1], b"\xff\xff"), b"\x01abcd", b"\x00",
              None]
    bad = decoder.decode(binaries(values)).bad
    assert bad == {
        0: "schema id 9 is not in the schema registry",
        1: "schema id 3 is a schema of type AVRO, not Protobuf",
        2: "schema id 4 is not a serialized Protobuf schema (a FileDescriptorProto in base64: "
           + bad[2].split("base64: ")[1],
        3: "the value (schema id 1) is a message of type t.Other, the stream reads t.Event",
        4: "the value (schema id 1) is a message of type t.Event.Inner, the stream reads t.Event",
        5: "the value (schema id 1) has message indexes [5], naming no message of its schema",
        6: "the value (schema id 1) ends inside its message indexes",
        7: "the value (schema id 1) has a message index count of 1, with 0 bytes left",
        8: "the value (schema id 1) does not decode as message t.Event: " + bad[8].split("t.Event: ")[1],
        9: "the value is not in the Confluent wire format: its first byte is 0x01, not the magic "
           "byte 0x00",
        10: "the value is not in the Confluent wire format: 1 byte, shorter than its 5-byte "
            "header"}


def test_each_writer_id_is_looked_up_once():
    asked: list[int] = []
    decoder = ProtobufDecoder(READER, lambda i: asked.append(i) or _SCHEMAS.get(i))
    value = _indexes([1], Reader(id="a").SerializeToString())
    for _ in range(2):
        decoder.decode(binaries([value, value, frame(9, b"\x00"), _indexes([1, 0], b"")]))
    assert sorted(asked) == [1, 9]


def test_evolution_follows_protobufs_rules():
    """A newer writer's field the reader lacks is skipped; a field the writer lacks reads as
    its default (NULL where it has presence)."""
    newer = Writer(id="a", n=3, gone="x", tags=["t"]).SerializeToString()
    (got,) = ProtobufDecoder(READER, _SCHEMAS.get).decode(binaries([frame(2, b"\x00" + newer)])
                                                          ).values.to_pylist()
    assert (got["id"], got["n"], got["tags"], got["added"]) == ("a", 3, ["t"], None)
    older = Reader(id="b", added="y").SerializeToString()  # read by the writer's message
    (got,) = ProtobufDecoder(WRITER, _SCHEMAS.get).decode(binaries([_indexes([1], older)])
                                                          ).values.to_pylist()
    assert (got["id"], got["gone"]) == ("b", "") and "added" not in got


def test_values_decode_to_their_spark_values():
    decoder = ProtobufDecoder(READER)
    message = Reader(id="é", n=-1, ts={"seconds": 1_790_000_000, "nanos": 123_456_789}, kind=1,
                     tags=["a", "b"], attrs={"k": 7}, inner={"y": 2}, w={"value": 0},
                     u=2**32 - 1, f=1.5, added="")
    unknown_kind = Reader(kind=7, ts={"seconds": 2**40})  # out of Timestamp's years: NULL
    got = decoder.decode(binaries([message.SerializeToString(), unknown_kind.SerializeToString()]))
    first, second = got.values.to_pylist()
    assert first == {"id": "é", "n": -1, "ts": datetime(2026, 9, 21, 14, 13, 20, 123456,
                                                        timezone.utc),
                     "kind": "CLICK", "tags": ["a", "b"], "attrs": [("k", 7)],
                     "inner": {"y": 2}, "w": 0, "u": -1, "f": 1.5, "added": ""}
    assert (second["kind"], second["ts"], second["inner"], second["w"], second["added"]) == (
        "UNKNOWN_ENUM_VALUE_Kind_7", None, None, None, None)


def test_a_nested_reader_message_reads_indexes_1_0():
    schema = ProtoSchema.of(READER_FILE, (), "t.Event.Inner")
    decoder = ProtobufDecoder(schema, _SCHEMAS.get)
    inner = _class(schema)(y=5).SerializeToString()
    got = decoder.decode(binaries([_indexes([1, 0], inner), _indexes([1], inner)]))
    assert got.values.to_pylist()[0] == {"y": 5}
    assert got.bad == {1: "the value (schema id 1) is a message of type t.Event, the stream "
                          "reads t.Event.Inner"}


@given(st.lists(st.integers(0, 2**31), min_size=1, max_size=4), st.binary(max_size=3))
def test_message_indexes_read_back_as_written(indexes, rest):
    value = frame(7, index_bytes(indexes) + rest)
    assert message_indexes(value) == (tuple(indexes), len(value) - len(rest))
    assert (index_bytes(indexes) == b"\x00") == (indexes == [0])


@given(st.lists(st.one_of(st.none(), st.binary(max_size=8)), max_size=30), st.integers(0, 4))
def test_the_single_zero_index_read_from_the_buffers_equals_the_reference(values, cut):
    array = binaries(values).slice(min(cut, len(values)))
    _, problems = headers(array)
    want = []
    for v in array.to_pylist():
        try:
            want.append(v is not None and len(v) > 5 and v[0] == 0
                        and message_indexes(v) == ((0,), 6) and v[5] == 0)
        except ValueError:
            want.append(False)
    assert first_message(array, problems).tolist() == want


def test_a_descriptor_set_file_reads_with_its_imports(tmp_path):
    common = _file(_message("Money", _field("cents", 1, F.TYPE_INT64)), name="common/money.proto")
    order = _file(_message("Order", _field("id", 1, F.TYPE_STRING),
                           _field("price", 2, F.TYPE_MESSAGE, type_name=".t.Money"),
                           _field("at", 3, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")),
                  name="order.proto", deps=("common/money.proto", TIMESTAMP))
    path = tmp_path / "x.desc"
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[common, order]).SerializeToString())
    schema = read_descriptor_file(str(path), "descFile")
    assert [name for name, _ in schema.references] == ["common/money.proto"]
    assert spark_type(schema).simpleString() == "struct<id:string,price:struct<cents:bigint>," \
                                                "at:timestamp>"
    assert read_descriptor_file(str(path), "descFile", "t.Money").message == "t.Money"
    value = _class(schema)(id="o", price={"cents": 5}).SerializeToString()
    (got,) = ProtobufDecoder(schema).decode(binaries([value])).values.to_pylist()
    assert got == {"id": "o", "price": {"cents": 5}, "at": None}
    without = ProtoSchema(schema.file, (), None)
    with pytest.raises(SchemaError, match="order.proto imports common/money.proto, which is "
                                          "neither among its references"):
        spark_type(without)
    for bad, says in ((tmp_path / "none.desc", "descFile .*none.desc cannot be read"),
                      (path, "descFile .*x.desc has no message t.Nope")):
        with pytest.raises(SchemaError, match=says):
            read_descriptor_file(str(bad), "descFile", "t.Nope")
    (tmp_path / "junk.desc").write_bytes(b"\xff\xff")
    with pytest.raises(SchemaError, match="junk.desc is not a descriptor set"):
        read_descriptor_file(str(tmp_path / "junk.desc"), "descFile")


def test_the_arrow_type_of_each_column_is_pysparks_own():
    struct = spark_type(READER)
    assert ProtobufDecoder(READER).arrow == arrow_type(struct) == pyspark_arrow_type(struct)


def test_the_decode_path_leaves_pandas_unimported():
    script = textwrap.dedent("""
        import sys
        from tests.wire.test_protobuf import READER, Reader, _indexes, _SCHEMAS
        from sqe.wire.arrays import binaries
        from sqe.wire.protobuf import ProtobufDecoder
        value = _indexes([1], Reader(id="a", tags=["x"], attrs={"k": 1}).SerializeToString())
        got = ProtobufDecoder(READER, _SCHEMAS.get).decode(binaries([value, None, b"x"]))
        assert got.values.to_pylist()[0]["tags"] == ["x"] and list(got.bad) == [2]
        print("pandas" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"
