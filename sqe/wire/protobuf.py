"""Protobuf messages as Spark columns: the Spark type of a reader message, and a batch of
values decoded against it.

A schema is a :class:`~sqe.wire.protobuf_schema.ProtoSchema`: the Schema Registry's
serialized form of a file, its imports, and the message read (or one from a descriptor-set
file, :func:`~sqe.wire.protobuf_schema.read_descriptor_file`).

:func:`spark_type` maps a message as Spark's ``from_protobuf`` does: the 32-bit integers as
INT (``uint32``/``fixed32`` too, past 2^31 negative, as in Spark), the 64-bit ones as BIGINT,
``float``, ``double``, ``bool``, ``string``, ``bytes``; an enum as STRING (its value's name;
``UNKNOWN_ENUM_VALUE_<Enum>_<n>`` for a number it lacks, as Java names it); messages as
structs, repeated fields as arrays and maps as maps (neither holding NULL);
``google.protobuf.Timestamp`` as TIMESTAMP (NULL outside years 1-9999); the wrappers
(``google.protobuf.Int32Value``...) as their value (Spark's ``unwrap.well.known.types``);
fields of empty messages left out.  Recursive messages and ``google.protobuf.Duration``
(Spark's DayTimeIntervalType, which SQE's Arrow columns do not carry) are refused with the
field's path.  Every column is nullable (proto2 ``required`` fields aside), as Spark makes them,
but only a field with presence is ever NULL: a message, a proto2 or proto3 ``optional``, a
``oneof`` member or a wrapper, when unset; a proto3 scalar without presence gives its value (0,
"", false when unset), as Spark's ``from_protobuf`` does with ``emit.default.values=true``.

:class:`ProtobufDecoder` decodes the values of one batch: in the Confluent wire format
(:mod:`sqe.wire.framing`: header, message indexes, message) a value's writer schema id must be
known (``writers``, asked once per id) and its indexes must name the reader's message, which
parses it (protobuf's own evolution: unknown fields skipped, missing ones at their defaults);
without ``writers`` the values are plain messages.  Messages are parsed one by one (protobuf's
unit), the Arrow struct built a field at a time; a value that does not read gets a reason
(:attr:`Decoded.bad`).  :func:`decode_reference` reads the same a value at a time, and
``tests/wire/test_protobuf.py`` holds them equal.

Example::

    >>> from google.protobuf import descriptor_pb2 as d
    >>> file = d.FileDescriptorProto(name="e.proto", package="t", syntax="proto3")
    >>> _ = file.message_type.add(name="E").field.add(name="n", number=1, type=3, label=1)
    >>> spark_type(ProtoSchema.of(file)).simpleString()
    'struct<n:bigint>'
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyspark.sql.types as T

from sqe.errors import SchemaError
from sqe.wire import framing
from sqe.wire import protobuf_schema as schemas
from sqe.wire.arrays import binaries, booleans, from_numpy, present, value_offsets
from sqe.wire.arrow_types import arrow_type
from sqe.wire.collector import paused
from sqe.wire.decoded import Decoded, Writer, decode_reference
from sqe.wire.protobuf_schema import ProtoSchema, protobuf_module, read_descriptor_file

__all__ = ["ProtoSchema", "ProtobufDecoder", "decode_reference", "read_descriptor_file",
           "spark_type"]

#: Protobuf's scalar type numbers -> (kind, Spark type, NumPy dtype read, NumPy dtype kept).
_SCALARS: dict[int, tuple[str, T.DataType, Any, Any]] = {
    **{t: ("int", T.IntegerType(), np.int32, np.int32) for t in (5, 15, 17)},  # int32, sfixed, sint
    **{t: ("int", T.IntegerType(), np.uint32, np.int32) for t in (7, 13)},  # fixed32, uint32
    **{t: ("int", T.LongType(), np.int64, np.int64) for t in (3, 16, 18)},
    **{t: ("int", T.LongType(), np.uint64, np.int64) for t in (4, 6)},
    2: ("int", T.FloatType(), np.float32, np.float32), 8: ("bool", T.BooleanType(), bool, bool),
    1: ("int", T.DoubleType(), np.float64, np.float64),
    9: ("string", T.StringType(), None, None), 12: ("bytes", T.BinaryType(), None, None)}
_WRAPPERS = {f"google.protobuf.{n}Value" for n in (
    "Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}
_MIN_SECONDS, _MAX_SECONDS = -62135596800, 253402300799  # 0001-01-01, 9999-12-31T23:59:59
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SECONDS, _NANOS, _VALUE = attrgetter("seconds"), attrgetter("nanos"), attrgetter("value")


class _Node(NamedTuple):
    """How one type reads: its kind (int, bool, string, bytes, enum, timestamp, wrapper,
    message), Spark type, and what the kind needs."""

    kind: str
    spark: T.DataType
    dtypes: tuple[Any, Any] = (None, None)
    names: dict[int, bytes] | None = None  # an enum's numbers -> names
    enum: str = ""
    inner: Any = None  # a wrapper's _Node; a message's fields (_Field)


class _Field(NamedTuple):
    name: str
    shape: str  # one (never NULL), presence, list, map
    node: _Node
    key: _Node | None = None

    def spark(self) -> T.DataType:
        if self.shape == "list":
            return T.ArrayType(self.node.spark, containsNull=False)
        if self.key is not None:
            return T.MapType(self.key.spark, self.node.spark, valueContainsNull=False)
        return self.node.spark


class _Walk:
    """The walk of one message into Spark types (see the module docstring)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def message(self, d: Any, path: str, seen: frozenset[str]) -> _Node | None:
        if d.full_name in seen:
            raise self.refuse(path, f"the message {d.full_name} holds itself; Spark columns "
                                    "cannot be recursive")
        fields = [f for f in (self.field(fd, f"{path}.{fd.name}".lstrip("."), seen | {
            d.full_name}) for fd in d.fields) if f is not None]
        struct = T.StructType([T.StructField(f.name, f.spark(), not d.fields_by_name[f.name]
                                             .is_required) for f in fields])
        return _Node("message", struct, inner=tuple(fields)) if fields else None

    def node(self, fd: Any, path: str, seen: frozenset[str]) -> _Node | None:
        if fd.type in _SCALARS:
            kind, spark, read, kept = _SCALARS[fd.type]
            return _Node(kind, spark, (read, kept))
        if fd.type == fd.TYPE_ENUM:
            names = {v.number: v.name.encode() for v in reversed(fd.enum_type.values)}
            return _Node("enum", T.StringType(), names=names, enum=fd.enum_type.name)
        m = fd.message_type
        if m.full_name == "google.protobuf.Timestamp":
            return _Node("timestamp", T.TimestampType())
        if m.full_name == "google.protobuf.Duration":
            raise self.refuse(path, "a google.protobuf.Duration is Spark's DayTimeIntervalType, "
                                    "which SQE's Arrow columns do not carry")
        if m.full_name in _WRAPPERS:
            inner = self.node(m.fields_by_name["value"], path, seen)
            return _Node("wrapper", inner.spark, inner=inner) if inner else None
        return self.message(m, path, seen)

    def field(self, fd: Any, path: str, seen: frozenset[str]) -> _Field | None:
        entry = fd.message_type if fd.type == fd.TYPE_MESSAGE else None
        if fd.is_repeated and entry is not None and entry.GetOptions().map_entry:
            key = self.node(entry.fields_by_name["key"], f"{path}{{key}}", seen)
            value = self.node(entry.fields_by_name["value"], f"{path}{{}}", seen)
            return _Field(fd.name, "map", value, key) if value and key else None
        node = self.node(fd, path, seen)
        shape = "list" if fd.is_repeated else "presence" if (
            fd.has_presence and not fd.is_required) else "one"
        return _Field(fd.name, shape, node) if node else None

    def refuse(self, path: str, why: str) -> SchemaError:
        return SchemaError(f"{self.what}: field {path or '(top)'}: {why}")


def _top(schema: ProtoSchema, what: str) -> tuple[Any, _Node]:
    d = schemas.descriptor(schema, what)
    node = _Walk(what).message(d, "", frozenset())
    if node is None:
        raise SchemaError(f"{what}: the message {d.full_name} has no field Spark can read")
    return d, node


def spark_type(schema: ProtoSchema, what: str = "the Protobuf schema") -> T.StructType:
    """The Spark struct of ``schema``'s message (its fields as columns; see the module
    docstring); a message Spark has no columns for is a :class:`SchemaError` naming the field."""
    return _top(schema, what)[1].spark  # type: ignore[return-value]


def _valid(array: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """``array`` (no NULLs, not sliced) NULL where ``valid`` is False."""
    if valid is None or valid.all():
        return array
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(array.type, len(array), [bitmap, *array.buffers()[1:]])


def _column(node: _Node, values: list[Any], valid: np.ndarray | None) -> pa.Array:
    """The Arrow column of ``values`` (Python scalars or messages, all there), NULL where
    ``valid`` is False."""
    n, kind = len(values), node.kind
    if kind == "int":
        numbers = np.array(values, dtype=node.dtypes[0]).view(node.dtypes[1])
        return from_numpy(numbers, arrow_type(node.spark), valid)
    if kind == "bool":
        return booleans(np.fromiter(values, dtype=bool, count=n), valid)
    if kind in ("string", "bytes"):
        raw = [v.encode("utf-8") for v in values] if kind == "string" else values
        return _valid(binaries(raw, arrow_type(node.spark)), valid)
    if kind == "enum":
        names, missing = node.names or {}, set(values) - (node.names or {}).keys()
        if missing:  # numbers the enum lacks (an open enum's), named as Java names them
            names = {**names, **{v: b"UNKNOWN_ENUM_VALUE_%s_%d" % (node.enum.encode(), v)
                                 for v in missing}}
        return _valid(binaries(list(map(names.__getitem__, values)), pa.string()), valid)
    if kind == "timestamp":
        seconds = np.fromiter(map(_SECONDS, values), dtype=np.int64, count=n)
        fits = (seconds >= _MIN_SECONDS) & (seconds <= _MAX_SECONDS)
        micros = (np.where(fits, seconds, 0) * 1_000_000
                  + np.fromiter(map(_NANOS, values), dtype=np.int64, count=n) // 1000)
        return from_numpy(micros, pa.timestamp("us", tz="UTC"), fits & (
            True if valid is None else valid))
    if kind == "wrapper":
        return _column(node.inner, list(map(_VALUE, values)), valid)
    mask = None if valid is None or valid.all() else booleans(~valid)
    return pa.StructArray.from_arrays([_field(f, values) for f in node.inner],
                                      fields=list(arrow_type(node.spark)), mask=mask)


def _field(f: _Field, messages: list[Any]) -> pa.Array:
    """The Arrow column of field ``f`` of ``messages``."""
    n, values = len(messages), list(map(attrgetter(f.name), messages))
    if f.shape in ("one", "presence"):
        return _column(f.node, values, None if f.shape == "one" else np.fromiter(
            map(methodcaller("HasField", f.name), messages), dtype=bool, count=n))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int32, count=n), out=offsets[1:])
    if f.key is None:
        items = _column(f.node, list(chain.from_iterable(values)), None)
        return pa.ListArray.from_arrays(from_numpy(offsets), items, type=arrow_type(f.spark()))
    pairs = list(chain.from_iterable(v.items() for v in values))
    return pa.MapArray.from_arrays(
        from_numpy(offsets), _column(f.key, [k for k, _ in pairs], None),
        _column(f.node, [v for _, v in pairs], None), type=arrow_type(f.spark()))


def _python(node: _Node, value: Any) -> Any:
    """One value of ``node`` as a Python value (the reference of :func:`_column`)."""
    if node.kind == "int" and node.dtypes[0] in (np.uint32, np.uint64):
        bits = 32 if node.dtypes[0] is np.uint32 else 64
        return value - (1 << bits) if value >> (bits - 1) else value
    if node.kind == "enum":
        name = (node.names or {}).get(value)
        return name.decode() if name else f"UNKNOWN_ENUM_VALUE_{node.enum}_{value}"
    if node.kind == "timestamp":
        if not _MIN_SECONDS <= value.seconds <= _MAX_SECONDS:
            return None
        return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
    if node.kind == "wrapper":
        return _python(node.inner, value.value)
    if node.kind != "message":
        return value
    out = {}
    for f in node.inner:
        v = getattr(value, f.name)
        out[f.name] = ([_python(f.node, x) for x in v] if f.shape == "list" else
                       [(_python(f.key, k), _python(f.node, x)) for k, x in v.items()]
                       if f.shape == "map" else None if f.shape == "presence"
                       and not value.HasField(f.name) else _python(f.node, v))
    return out


class ProtobufDecoder:
    """Decodes batches of values against one reader message (see the module docstring)."""

    def __init__(self, reader: ProtoSchema, writers: Writer | None = None) -> None:
        self.descriptor, self.node = _top(reader, "the reader schema")
        self.struct: T.StructType = self.node.spark  # type: ignore[assignment]
        self.arrow = arrow_type(self.struct)
        self.message = self.descriptor.full_name
        self.cls = protobuf_module().message_factory.GetMessageClass(self.descriptor)
        self.writers = writers
        self._by_id: dict[int, Any] = {}  # writers' message names by indexes, or why not
        self._targets: dict[tuple[int, tuple[int, ...]], str | None] = {}

    #: The writer of a value without a header: none to check (it is the reader's message).
    plain = None

    def writer(self, schema_id: int) -> Any:
        """The messages of ``schema_id`` by their indexes, or why values of it cannot be read."""
        if schema_id not in self._by_id:
            assert self.writers is not None
            found, why = self.writers(schema_id), f"schema id {schema_id} "
            if found is None:
                self._by_id[schema_id] = why + "is not in the schema registry"
            elif found[0].upper() != "PROTOBUF":
                self._by_id[schema_id] = why + f"is a schema of type {found[0]}, not Protobuf"
            else:
                try:
                    names = schemas.message_names(schemas.file_proto(found[1], why.strip()))
                    self._by_id[schema_id] = {v: k for k, v in names.items()}
                except SchemaError as exc:
                    self._by_id[schema_id] = str(exc)
        return self._by_id[schema_id]

    def target(self, schema_id: int, indexes: tuple[int, ...]) -> str | None:
        """Why values of ``schema_id`` with message ``indexes`` are not of the reader's message
        (None: they are)."""
        if (schema_id, indexes) not in self._targets:
            self._targets[schema_id, indexes] = self._why_not(self.writer(schema_id), schema_id,
                                                              indexes)
        return self._targets[schema_id, indexes]

    def _why_not(self, writer: Any, schema_id: int, indexes: tuple[int, ...]) -> str | None:
        name, what = writer.get(indexes), f"the value (schema id {schema_id})"
        if name is None:
            return f"{what} has message indexes {list(indexes)}, naming no message of its schema"
        if name != self.message:
            return f"{what} is a message of type {name}, the stream reads {self.message}"
        return None

    def one(self, payload: memoryview, writer: Any, schema_id: int | None) -> Any:
        """One value's record (``payload`` after its header; ``writer`` as :meth:`writer`
        gives it); a bad value raises :class:`SchemaError` with the reason."""
        what, at = "the value", 0
        if isinstance(writer, str):
            raise SchemaError(writer)
        if schema_id is not None:
            what = f"the value (schema id {schema_id})"
            try:
                indexes, at = framing.message_indexes(payload, 0)
            except ValueError as exc:
                raise SchemaError(f"{what} {exc}") from None
            why = self._why_not(writer, schema_id, indexes)
            if why is not None:
                raise SchemaError(why)
        try:
            return _python(self.node, self.cls.FromString(payload[at:]))
        except protobuf_module().message.DecodeError as exc:
            raise SchemaError(f"{what} does not decode as message {self.message}: {exc}") from None

    def decode(self, values: pa.Array) -> Decoded:
        """The batch ``values`` (binary) decoded (see :class:`Decoded`); Python's cyclic
        garbage collector waits meanwhile (the batch's many messages and lists would set it
        off again and again, for nothing it could free)."""
        with paused():
            return self._decode(values)

    def _decode(self, values: pa.Array) -> Decoded:
        bad: dict[int, str] = {}
        buffer, offsets = values.buffers()[2], value_offsets(values)
        data = b"" if buffer is None else buffer.to_pybytes()  # bytes slice faster than views
        ok, starts, ids = present(values).copy(), offsets[:-1].copy(), None
        if self.writers is not None:
            ids, problems = framing.headers(values)
            for i in np.flatnonzero((problems != framing.OK) & (problems != framing.NULL)).tolist():
                bad[i] = framing.problem_text(bytes(data[offsets[i]:offsets[i + 1]]),
                                              int(problems[i]))
            ok, fast = problems == framing.OK, framing.first_message(values, problems)
            starts[fast] += framing.HEADER_BYTES + 1
            for sid in np.unique(ids[ok]).tolist():
                of = ok & (ids == sid)
                writer = self.writer(sid)
                why = writer if isinstance(writer, str) else self.target(sid, (0,))
                if why is not None:  # every value of the id, or those of the common [0]
                    refused = of if isinstance(writer, str) else of & fast
                    bad.update(dict.fromkeys(np.flatnonzero(refused).tolist(), why))
                    ok[refused] = False
                for i in np.flatnonzero(ok & of & ~fast).tolist():  # the others, one at a time
                    try:
                        indexes, start = framing.message_indexes(
                            data, int(starts[i]) + framing.HEADER_BYTES, int(offsets[i + 1]))
                        starts[i], why = start, self.target(sid, indexes)
                    except ValueError as exc:
                        why = f"the value (schema id {sid}) {exc}"
                    if why is not None:
                        ok[i], bad[i] = False, why
        at, begin, ends = np.flatnonzero(ok).tolist(), starts.tolist(), offsets[1:].tolist()
        parse, error = self.cls.FromString, protobuf_module().message.DecodeError
        messages = [self.cls()] * len(values)
        try:
            for i, message in zip(at, map(parse, [data[begin[i]:ends[i]] for i in at]),
                                  strict=True):
                messages[i] = message
        except error:  # a value that does not parse: each alone, to say which
            for i in at:
                try:
                    messages[i] = parse(data[begin[i]:ends[i]])
                except error as exc:
                    what = "the value" if ids is None else f"the value (schema id {ids[i]})"
                    ok[i], bad[i] = False, f"{what} does not decode as message {self.message}: {exc}"
        return Decoded(_column(self.node, messages, ok), bad)
