"""Rows written as Protobuf messages: the writer schema of a query's output, and a batch of rows
encoded in the Confluent wire format.

:func:`protobuf_schema` derives a proto3 file from Spark types, as Spark's ``to_protobuf``
would need it: one message, its fields numbered 1..n in column order; BOOLEAN as ``bool``,
BYTE, SHORT and INT as ``int32``, BIGINT as ``int64``, FLOAT, DOUBLE, STRING as ``string``,
BINARY as ``bytes``, DATE as ``int32`` (days since 1970-01-01), TIMESTAMP and TIMESTAMP_NTZ as
``google.protobuf.Timestamp``, DECIMAL as ``string`` (its plain text); an array as a repeated
field, a map with string, integral or boolean keys as a ``map<,>``, a struct as a nested
message.  A nullable scalar column is a proto3 ``optional`` field, so that a NULL is an unset
field and reads back NULL; a NULL struct is an unset message.  Protobuf has no NULL array or
map (they read back empty) and no NULL element: as Spark's ``to_protobuf``, a column that
may hold NULL elements is taken and a row that holds one is refused.  An array of arrays or
maps, a map of arrays or maps, other map keys, and a column name that is not a Protobuf name are
refused in one sentence naming the column.

:class:`ProtobufEncoder` writes one batch's rows (one Arrow struct array): each column made
Protobuf's Python values at once, then each row's message made by the schema's message class
(upb) and written one after the other into one buffer, each after its header (the schema's id
and the message indexes of its message, the single byte 0 for a file's first message:
:func:`sqe.wire.framing.frame`, :func:`~sqe.wire.framing.index_bytes`).  :func:`encode_reference`
writes the same a row at a time from Python rows, and ``tests/wire/test_protobuf_write.py``
holds them equal and reads the messages back with :class:`~sqe.wire.protobuf.ProtobufDecoder`.

Example::

    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> schema = protobuf_schema(StructType([StructField("n", LongType())]), "sqe.Out")
    >>> from sqe.wire.protobuf import spark_type
    >>> spark_type(schema).simpleString(), schema.message
    ('struct<n:bigint>', 'sqe.Out')
"""

from __future__ import annotations

import io
import re
from datetime import date, datetime, timedelta, timezone
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyspark.sql.types as T

from sqe.errors import SchemaError
from sqe.wire import framing
from sqe.wire.arrays import packed, present, to_numpy
from sqe.wire.collector import paused
from sqe.wire.protobuf_schema import ProtoSchema, descriptor, message_path, protobuf_module

__all__ = ["ProtobufEncoder", "encode_reference", "protobuf_schema"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Spark types -> Protobuf's type numbers (bool 8, int32 5, int64 3, float 2, double 1,
#: string 9, bytes 12; DATE as its days, DECIMAL as its text).
_SCALARS: list[tuple[type[T.DataType], int]] = [
    (T.BooleanType, 8), (T.ByteType, 5), (T.ShortType, 5), (T.IntegerType, 5), (T.LongType, 3),
    (T.FloatType, 2), (T.DoubleType, 1), (T.StringType, 9), (T.BinaryType, 12),
    (T.DateType, 5), (T.DecimalType, 9)]
_KEYS = (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)
_TIMESTAMP = ".google.protobuf.Timestamp"
_OPTIONAL, _REPEATED, _MESSAGE = 1, 3, 11
_EPOCH, _EPOCH_NTZ = datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(1970, 1, 1)
_DAY0, _MICRO = date(1970, 1, 1), timedelta(microseconds=1)


def _camel(name: str) -> str:
    """``name`` as protoc names a map field's entry (``my_map`` -> ``MyMap``)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) or "Field"


class _Build:
    """The messages of one file, made from Spark types (see the module docstring)."""

    def __init__(self) -> None:
        self.timestamps = False

    def message(self, msg: Any, struct: T.StructType, path: str, scope: str) -> None:
        taken = {f"{_camel(f.name)}Entry" for f in struct.fields}
        for number, f in enumerate(struct.fields, 1):
            where = f"{path}.{f.name}" if path else f.name
            if not _NAME.fullmatch(f.name):
                raise SchemaError(f"column {where!r} has no Protobuf field name (letters, digits "
                                  "and _, not starting with a digit)")
            field, t = msg.field.add(name=f.name, number=number, label=_OPTIONAL), f.dataType
            if isinstance(t, T.MapType):
                if not isinstance(t.keyType, _KEYS):
                    raise SchemaError(f"column {where}: a map with {t.keyType.simpleString()} "
                                      "keys has no Protobuf type (its keys are strings, "
                                      "integers or booleans)")
                entry = msg.nested_type.add(name=f"{_camel(f.name)}Entry")
                entry.options.map_entry = True
                self.type(entry, entry.field.add(name="key", number=1, label=_OPTIONAL),
                          t.keyType, f"{where}{{key}}", "", taken)
                self.type(msg, entry.field.add(name="value", number=2, label=_OPTIONAL),
                          t.valueType, f"{where}{{}}", scope, taken)
                field.label, field.type, field.type_name = (_REPEATED, _MESSAGE,
                                                            f".{scope}.{entry.name}")
            elif isinstance(t, T.ArrayType):
                field.label = _REPEATED
                self.type(msg, field, t.elementType, f"{where}[]", scope, taken)
            else:
                self.type(msg, field, t, where, scope, taken)
                if f.nullable and not isinstance(t, T.StructType):
                    field.proto3_optional, field.oneof_index = True, len(msg.oneof_decl)
                    msg.oneof_decl.add(name=f"_{f.name}")

    def type(self, msg: Any, field: Any, t: T.DataType, where: str, scope: str,
             taken: set[str]) -> None:
        """Give ``field`` (of ``msg``, full name ``scope``) the type of one value of ``t``."""
        for cls, number in _SCALARS:
            if isinstance(t, cls):
                field.type = number
                return
        if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
            field.type, field.type_name, self.timestamps = _MESSAGE, _TIMESTAMP, True
        elif isinstance(t, T.StructType):
            name = _camel(re.sub(r"\W", "", where.rsplit(".", 1)[-1]))
            while name in taken:
                name += "_"
            taken.add(name)
            nested = msg.nested_type.add(name=name)
            self.message(nested, t, where, f"{scope}.{name}")
            field.type, field.type_name = _MESSAGE, f".{scope}.{name}"
        elif isinstance(t, (T.ArrayType, T.MapType)):
            outer = "an array" if where.endswith("]") else "a map"
            raise SchemaError(f"column {where.rstrip('[]{}')}: {outer} of {t.typeName()}s has no "
                              "Protobuf type (a repeated field or map value cannot repeat)")
        else:
            raise SchemaError(f"column {where}: a {t.simpleString()} has no Protobuf type")


def protobuf_schema(struct: T.StructType, full_name: str) -> ProtoSchema:
    """The Protobuf schema (a proto3 file of one message, named ``full_name``,
    ``package.Name``) of rows of ``struct``; a type Protobuf has none for is a
    :class:`SchemaError` naming the column."""
    if not all(_NAME.fullmatch(part) for part in full_name.split(".")):
        raise SchemaError(f"{full_name!r} is not a Protobuf message name (names of letters, "
                          "digits and _ joined by dots)")
    package, _, name = full_name.rpartition(".")
    file = protobuf_module().descriptor_pb2.FileDescriptorProto(
        name=f"{full_name.replace('.', '/')}.proto", package=package, syntax="proto3")
    build = _Build()
    build.message(file.message_type.add(name=name), struct, "", full_name)
    if build.timestamps:
        file.dependency.append("google/protobuf/timestamp.proto")
    schema = ProtoSchema.of(file, (), full_name)
    descriptor(schema, f"the Protobuf schema of {full_name}")  # builds, or says why not
    return schema


class _Conv(NamedTuple):
    """How one Arrow type's values become Protobuf's Python values: its kind (plain, date,
    timestamp, decimal, list, map, struct), where it is, and its parts'."""

    kind: str
    path: str
    parts: tuple[tuple[str, Any], ...] = ()  # names and _Conv of a struct's fields, a list's
    # element, a map's key and value


def _conv(t: pa.DataType, path: str) -> _Conv:
    if pa.types.is_date32(t):
        return _Conv("date", path)
    if pa.types.is_timestamp(t):
        return _Conv("timestamp", path)
    if pa.types.is_decimal(t):
        return _Conv("decimal", path)
    if pa.types.is_map(t):
        return _Conv("map", path, (("key", _conv(t.key_type, path)),
                                   ("value", _conv(t.item_type, path))))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _Conv("list", path, (("element", _conv(t.value_type, path)),))
    if pa.types.is_struct(t):
        return _Conv("struct", path, tuple((f.name, _conv(f.type, f"{path}.{f.name}".lstrip(".")))
                                           for f in t))
    return _Conv("plain", path)


def _null_element(c: _Conv) -> SchemaError:
    return SchemaError(f"a row does not fit the writer schema: column {c.path} holds a NULL "
                       "element, which a repeated Protobuf field or map cannot carry")


def _python(c: _Conv, v: Any) -> Any:
    """One value (as ``to_pylist`` gives it) as Protobuf's (the reference of :func:`_column`)."""
    if v is None or c.kind == "plain":
        return v
    if c.kind == "date":
        return (v - _DAY0).days
    if c.kind == "timestamp":
        micros = (v - (_EPOCH if v.tzinfo else _EPOCH_NTZ)) // _MICRO
        return {"seconds": micros // 1_000_000, "nanos": micros % 1_000_000 * 1000}
    if c.kind == "decimal":
        return format(v, "f")
    if c.kind == "struct":
        return {name: _python(part, v[name]) for name, part in c.parts}
    items = [(_python(c.parts[0][1], k), _python(c.parts[1][1], x)) for k, x in v] if (
        c.kind == "map") else [(None, _python(c.parts[0][1], x)) for x in v]
    if any(x is None for _, x in items):
        raise _null_element(c)
    return dict(items) if c.kind == "map" else [x for _, x in items]


def _column(c: _Conv, array: pa.Array) -> list[Any]:
    """The values of ``array`` as Protobuf's, a column at a time."""
    valid = present(array)
    if c.kind == "plain":
        return array.to_pylist()
    if c.kind == "date":
        return array.view(pa.int32()).to_pylist()
    if c.kind == "decimal":  # plain (Arrow's own text is 1E-12 for 0.000000000001)
        return [None if d is None else format(d, "f") for d in array.to_pylist()]
    if c.kind == "timestamp":
        us = array.cast(pa.timestamp("us", array.type.tz))
        micros = np.frombuffer(us.buffers()[1], dtype=np.int64)[us.offset:us.offset + len(us)]
        return [{"seconds": s, "nanos": n} if ok else None for s, n, ok in zip(
            (micros // 1_000_000).tolist(), (micros % 1_000_000 * 1000).tolist(),
            valid.tolist(), strict=True)]
    if c.kind == "struct":
        names = [name for name, _ in c.parts]
        columns = [_column(part, array.field(i)) for i, (_, part) in enumerate(c.parts)]
        return [dict(zip(names, values, strict=True)) if ok else None
                for ok, *values in zip(valid.tolist(), *columns, strict=True)]
    offsets = to_numpy(array.offsets).astype(np.int64)
    first, inner = int(offsets[0]), array.values.slice(offsets[0], offsets[-1] - offsets[0])
    starts, ends = (offsets[:-1] - first).tolist(), (offsets[1:] - first).tolist()
    parts = [inner.field(0), inner.field(1)] if c.kind == "map" else [inner]
    nulls = np.flatnonzero(~present(parts[-1]))
    if len(nulls) and valid[np.searchsorted(offsets, nulls + first, side="right") - 1].any():
        raise _null_element(c)
    flat = [_column(part, values) for (_, part), values in zip(c.parts, parts, strict=True)]
    if c.kind == "list":
        return [flat[0][a:b] if ok else None for a, b, ok in zip(starts, ends, valid.tolist(),
                                                                    strict=True)]
    return [dict(zip(flat[0][a:b], flat[1][a:b], strict=True)) if ok else None
            for a, b, ok in zip(starts, ends, valid.tolist(), strict=True)]


class ProtobufEncoder:
    """Encodes batches of rows (an Arrow struct array) as messages of one writer schema, framed
    with its id and the message's indexes (None: plain Protobuf messages)."""

    def __init__(self, schema: ProtoSchema, schema_id: int | None, rows: pa.DataType) -> None:
        d = descriptor(schema, "the writer schema")
        self.cls = protobuf_module().message_factory.GetMessageClass(d)
        self.schema_id = schema_id
        self.header = b"" if schema_id is None else framing.frame(
            schema_id, framing.index_bytes(message_path(d)))
        self.convert = _conv(rows, "")
        for name, _ in self.convert.parts:
            if name not in d.fields_by_name:
                raise SchemaError(f"the rows' column {name} is not a field of the writer "
                                  f"schema's message {d.full_name}")

    def _message(self, fields: dict[str, Any]) -> bytes:
        try:
            return self.cls(**fields).SerializeToString()
        except (ValueError, TypeError) as exc:
            raise SchemaError(f"a row does not fit the writer schema: {exc}") from None

    def one(self, row: dict[str, Any]) -> bytes:
        """One row's message (a row the schema cannot take is a :class:`SchemaError`)."""
        return self.header + self._message(_python(self.convert, row))

    def encode(self, rows: pa.Array) -> pa.Array:
        """The messages of ``rows`` (a NULL row stays NULL: a tombstone), written one after the
        other into one buffer, each after its header; Python's cyclic garbage collector waits
        meanwhile (as in :meth:`sqe.wire.protobuf.ProtobufDecoder.decode`)."""
        with paused():
            return self._encode(rows)

    def _encode(self, rows: pa.Array) -> pa.Array:
        names = [name for name, _ in self.convert.parts]
        columns = [_column(part, rows.field(i)) for i, (_, part) in enumerate(self.convert.parts)]
        valid = present(rows)
        out = io.BytesIO()
        put, tell, make, header = out.write, out.tell, self.cls, self.header
        ends = []
        for ok, *values in zip(valid.tolist(), *columns, strict=True):
            if ok:
                put(header)
                try:
                    put(make(**dict(zip(names, values, strict=True))).SerializeToString())
                except (ValueError, TypeError):
                    self._message(dict(zip(names, values, strict=True)))  # raises its sentence
                    raise
            ends.append(tell())
        return packed(out.getbuffer(), ends, None if valid.all() else valid)


def encode_reference(encoder: ProtobufEncoder, rows: list[dict[str, Any] | None]
                     ) -> list[bytes | None]:
    """:meth:`ProtobufEncoder.encode` a row at a time, from Python rows."""
    return [None if row is None else encoder.one(row) for row in rows]
