"""Avro records as Spark columns: the Spark type of a reader schema, and a batch of values
decoded against it.

:func:`spark_type` maps a record schema as Spark's own Avro reader (``from_avro``) does: each
field a column; records as structs, arrays and maps as Spark's; ``enum`` and ``uuid`` as
strings, ``fixed`` as binary; ``date`` as DATE, ``timestamp-millis``/``-micros`` as TIMESTAMP,
``local-timestamp-*`` as TIMESTAMP_NTZ, ``decimal`` as DECIMAL(p, s); ``time-*`` as their
INT/BIGINT; a union with ``null`` as a nullable column of its other branch, ``[int, long]``
as BIGINT and ``[float, double]`` as DOUBLE.  Other unions (Spark makes them structs of
``member0``, ``member1``...) and recursive records are refused with the field's path.

:class:`AvroDecoder` decodes the values of one batch: in the Confluent wire format
(:mod:`sqe.wire.framing`) each value is read with its writer's schema, looked up by its id once
(``writers``), and resolved to the reader schema by Avro's rules, so a topic whose schema gained
a field with a default, or lost one, reads on; without ``writers`` the values are plain Avro
binary of the reader schema (as Spark's ``from_avro`` reads them).  Values are grouped by schema
id and decoded by fastavro's compiled reader, then made one Arrow struct array; a value that
does not decode gets a reason instead (:attr:`Decoded.bad`).  :func:`decode_reference` reads
the same a value at a time; ``tests/wire/test_avro.py`` holds them equal.

Example::

    >>> schema = '{"type": "record", "name": "E", "fields": [{"name": "n", "type": "long"}]}'
    >>> spark_type(schema).simpleString()
    'struct<n:bigint>'
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sqe.errors import SchemaError
from sqe.wire.arrays import present, value_offsets
from sqe.wire.arrow_types import arrow_type
from sqe.wire.decoded import Decoded, Writer, decode_reference
from sqe.wire.framing import HEADER_BYTES, NULL, OK, headers, problem_text

__all__ = ["AvroDecoder", "Decoded", "Writer", "decode_reference", "parse",
           "read_schema_file", "spark_type"]

_PRIMITIVE: dict[str, DataType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "bytes": BinaryType(), "string": StringType(), "null": NullType()}
#: Logical types read as their base type (fastavro would make Python objects Arrow cannot take).
_AS_BASE = {"uuid", "time-millis", "time-micros"}
_DATA_ERRORS = (ValueError, EOFError, IndexError, KeyError, TypeError, OverflowError,
                UnicodeDecodeError, AttributeError)


def fastavro_module() -> Any:
    try:
        import fastavro
    except ImportError:
        raise SchemaError("reading or writing Avro needs the package fastavro: "
                          "pip install 'sqe-spark[avro]'") from None
    return fastavro


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"{what} is not an Avro schema (not JSON: {exc})") from None


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Types:
    """The walk of one schema into Spark types, with its named types."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.names: dict[str, DataType | None] = {}  # None: a record being walked

    def of(self, s: Any, path: str, ns: str | None) -> tuple[DataType, bool]:
        """The Spark type of schema ``s`` at ``path`` and whether it may be NULL."""
        if isinstance(s, str):
            if s in _PRIMITIVE:
                return _PRIMITIVE[s], s == "null"
            for full in (_full(s, ns), s):
                if full in self.names:
                    known = self.names[full]
                    if known is None:
                        raise self.refuse(path, f"the record {full} holds itself; Spark "
                                                "columns cannot be recursive")
                    return known, False
            raise self.refuse(path, f"unknown type {s!r}")
        if isinstance(s, list):
            return self._union(s, path, ns)
        if not isinstance(s, dict) or "type" not in s:
            raise self.refuse(path, f"not a type: {json.dumps(s)[:80]}")
        kind = s["type"]
        if kind == "record" or kind == "error":
            return self._record(s, path, ns), False
        if kind in ("enum", "fixed"):
            t: DataType = StringType() if kind == "enum" else _decimal(s) or BinaryType()
            self.names[_full(str(s["name"]), s.get("namespace", ns))] = t
            return t, False
        if kind == "array":
            item, nullable = self.of(s["items"], f"{path}[]", ns)
            return ArrayType(item, nullable), False
        if kind == "map":
            value, nullable = self.of(s["values"], f"{path}{{}}", ns)
            return MapType(StringType(), value, nullable), False
        logical = _logical(s, kind)
        return (logical, False) if logical is not None else self.of(kind, path, ns)

    def _record(self, s: dict[str, Any], path: str, ns: str | None) -> StructType:
        full = _full(str(s.get("name", "")), s.get("namespace", ns))
        inner = full.rpartition(".")[0] or None
        self.names[full] = None
        fields = []
        for f in s.get("fields", []):
            name = str(f["name"])
            t, nullable = self.of(f["type"], f"{path}.{name}" if path else name, inner)
            fields.append(StructField(name, t, nullable))
        out = StructType(fields)
        self.names[full] = out
        return out

    def _union(self, branches: list[Any], path: str, ns: str | None) -> tuple[DataType, bool]:
        rest = [b for b in branches if b != "null"]
        nullable = len(rest) < len(branches)
        if not rest:
            return NullType(), True
        types = [self.of(b, path, ns)[0] for b in rest]
        if len(types) == 1:
            return types[0], nullable
        kinds = {t.typeName() for t in types}
        if kinds <= {"integer", "long"}:
            return LongType(), nullable
        if kinds <= {"float", "double"}:
            return DoubleType(), nullable
        raise self.refuse(path, f"a union of {', '.join(t.simpleString() for t in types)}: "
                                "SQE reads a union of one type with null (and of int with long, "
                                "float with double)")

    def refuse(self, path: str, why: str) -> SchemaError:
        return SchemaError(f"{self.what}: field {path or '(top)'}: {why}")


def _decimal(s: dict[str, Any]) -> DataType | None:
    if s.get("logicalType") != "decimal":
        return None
    precision, scale = int(s.get("precision", 0)), int(s.get("scale", 0))
    if not 0 < precision <= 38 or not 0 <= scale <= precision:
        return None  # Spark reads what it cannot hold as a DECIMAL as the bytes
    return DecimalType(precision, scale)


def _logical(s: dict[str, Any], kind: Any) -> DataType | None:
    logical = s.get("logicalType")
    if kind == "int" and logical == "date":
        return DateType()
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return TimestampNTZType()
    if kind == "bytes":
        return _decimal(s)
    return None


def spark_type(text: str, what: str = "the Avro schema") -> StructType:
    """The Spark struct of record schema ``text`` (its fields as columns; see the module
    docstring); a schema that is not a record, or holds a type Spark has no column for, is a
    :class:`SchemaError` naming the field."""
    schema = _loads(text, what)
    if not (isinstance(schema, dict) and schema.get("type") in ("record", "error")):
        kind = schema.get("type") if isinstance(schema, dict) else schema
        raise SchemaError(f"{what} is a {json.dumps(kind)}, not a record: SQE reads each "
                          "field of a record as a column")
    t, _ = _Types(what).of(schema, "", None)
    assert isinstance(t, StructType)
    return t


def _as_base(s: Any) -> Any:
    """Schema ``s`` without the logical types of :data:`_AS_BASE`."""
    if isinstance(s, list):
        return [_as_base(b) for b in s]
    if not isinstance(s, dict):
        return s
    out = {k: (_as_base(v) if k in ("type", "items", "values") else v) for k, v in s.items()
           if not (k == "logicalType" and v in _AS_BASE)}
    if "fields" in s:
        out["fields"] = [{**f, "type": _as_base(f["type"])} for f in s["fields"]]
    return out


def read_schema_file(path: str, option: str) -> tuple[str, str]:
    """The text of the schema file at ``path`` (named by option ``option``) and the file's
    path as a message names it; a file that cannot be read is a :class:`SchemaError`."""
    where = Path(path).expanduser()
    try:
        return where.read_text(encoding="utf-8"), str(where)
    except OSError as exc:
        raise SchemaError(f"{option} {where} cannot be read ({exc.strerror or exc})") from None


def parse(text: str, what: str = "the Avro schema") -> Any:
    """Schema ``text`` parsed for fastavro's reader and writer (:data:`_AS_BASE` as base)."""
    fastavro = fastavro_module()
    try:
        return fastavro.parse_schema(_as_base(_loads(text, what)))
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SchemaError(f"{what} is not a valid Avro schema: {exc}") from None


class AvroDecoder:
    """Decodes batches of values against one reader schema (see the module docstring)."""

    def __init__(self, reader: str, writers: Writer | None = None) -> None:
        self.struct = spark_type(reader, "the reader schema")
        self.arrow = arrow_type(self.struct)
        self.reader = parse(reader, "the reader schema")
        self.writers = writers
        self._by_id: dict[int, Any] = {}  # parsed writer schemas, or why one cannot be read

    @property
    def plain(self) -> Any:
        """The writer of a value without a header: the reader schema."""
        return self.reader

    def writer(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, or why values of it cannot be read."""
        if schema_id not in self._by_id:
            self._by_id[schema_id] = self._lookup(schema_id)
        return self._by_id[schema_id]

    def _lookup(self, schema_id: int) -> Any:
        assert self.writers is not None
        found = self.writers(schema_id)
        if found is None:
            return f"schema id {schema_id} is not in the schema registry"
        kind, text = found
        if kind.upper() != "AVRO":
            return f"schema id {schema_id} is a schema of type {kind}, not Avro"
        try:
            writer = parse(text, f"schema id {schema_id}")
        except SchemaError as exc:
            return str(exc)
        return self.reader if writer == self.reader else writer  # the same: nothing to resolve

    def one(self, payload: memoryview, writer: Any, schema_id: int | None) -> Any:
        """One value's record, read with ``writer`` as the reader schema; a bad value raises
        :class:`SchemaError` with the reason."""
        fastavro = fastavro_module()
        stream = io.BytesIO(payload)
        what = "the value" if schema_id is None else f"the value (schema id {schema_id})"
        try:
            record = fastavro.schemaless_reader(
                stream, writer, None if writer is self.reader else self.reader)
        except fastavro.read.SchemaResolutionError as exc:
            raise SchemaError(f"{what} cannot be read as the reader schema: {exc}") from None
        except _DATA_ERRORS as exc:
            raise SchemaError(f"{what} does not decode as Avro: "
                              f"{type(exc).__name__}: {exc}") from None
        left = len(payload) - stream.tell()
        if left:
            raise SchemaError(f"{what} does not decode as Avro: {left} "
                              f"{'byte is' if left == 1 else 'bytes are'} left after the record")
        return record

    def decode(self, values: pa.Array) -> Decoded:
        """The batch ``values`` (binary) decoded (see :class:`Decoded`)."""
        n = len(values)
        records: list[Any] = [None] * n
        bad: dict[int, str] = {}
        data = memoryview(values.buffers()[2] or b"")
        offsets = value_offsets(values).tolist()
        if self.writers is None:
            valid = np.flatnonzero(present(values))
            groups: list[tuple[int | None, Any, np.ndarray]] = [(None, self.reader, valid)]
            skip = 0
        else:
            ids, problems = headers(values)
            for i in np.flatnonzero((problems != OK) & (problems != NULL)).tolist():
                bad[i] = problem_text(bytes(data[offsets[i]:offsets[i + 1]]), int(problems[i]))
            framed = problems == OK
            groups = [(int(sid), self.writer(int(sid)), np.flatnonzero(framed & (ids == sid)))
                      for sid in np.unique(ids[framed]).tolist()]
            skip = HEADER_BYTES
        stream = io.BytesIO(data)  # one copy of the batch's bytes, read at each value's start
        read = fastavro_module().schemaless_reader
        errors = (fastavro_module().read.SchemaResolutionError, *_DATA_ERRORS)
        for sid, writer, at in groups:
            if isinstance(writer, str):
                bad.update(dict.fromkeys(at.tolist(), writer))
                continue
            resolve = None if writer is self.reader else self.reader
            for i in at.tolist():
                start, end = offsets[i] + skip, offsets[i + 1]
                stream.seek(start)
                try:
                    records[i] = read(stream, writer, resolve)
                    if stream.tell() == end:
                        continue
                except errors:
                    pass
                records[i] = None  # the value alone says why (it may have read past its end)
                bad[i] = self.why(data[start:end], writer, sid)
        return Decoded(pa.array(records, type=self.arrow), bad)

    def why(self, payload: memoryview, writer: Any, schema_id: int | None) -> str:
        """Why one value does not decode (:meth:`one`'s reason)."""
        try:
            self.one(payload, writer, schema_id)
        except SchemaError as exc:
            return str(exc)
        return "the value does not decode as Avro"  # read alone, it does: not reached
