"""Rows written as Avro records: the writer schema of a query's output, and a batch of rows
encoded in the Confluent wire format.

:func:`avro_schema` derives a record schema from Spark types as Spark's own ``to_avro`` does
(``int`` for INT and narrower, ``long``, ``float``, ``double``, ``string``, ``bytes``; DATE as
``date``, TIMESTAMP as ``timestamp-micros``, TIMESTAMP_NTZ as ``local-timestamp-micros``,
DECIMAL as ``bytes`` ``decimal``; arrays, maps with string keys and structs as nested records),
except that a nullable column is the union ``["null", type]`` with the default ``null``, so
that a field added later with a default keeps the subject compatible.  :class:`AvroEncoder`
writes one batch's rows (one Arrow struct array) with fastavro's compiled writer, each framed
with the schema's id (:func:`sqe.wire.framing.frame`); :func:`encode_reference` writes the
same a row at a time, and ``tests/wire/test_avro_write.py`` holds them equal and reads the
records back with the writer schema.

Example::

    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> avro_schema(StructType([StructField("n", LongType(), False)]), "sqe.Out")
    '{"type": "record", "name": "Out", "namespace": "sqe", "fields": [{"name": "n", "type": "long"}]}'
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sqe.errors import SchemaError
from sqe.wire.arrays import packed
from sqe.wire.avro import fastavro_module, parse
from sqe.wire.framing import frame

__all__ = ["AvroEncoder", "avro_name", "avro_schema", "encode_reference"]

_SIMPLE: list[tuple[type[DataType], Any]] = [
    (BooleanType, "boolean"), (ByteType, "int"), (ShortType, "int"), (IntegerType, "int"),
    (LongType, "long"), (FloatType, "float"), (DoubleType, "double"), (StringType, "string"),
    (BinaryType, "bytes"), (DateType, {"type": "int", "logicalType": "date"}),
    (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
]


def avro_name(text: str) -> str:
    """``text`` as an Avro name (letters, digits and ``_``; not starting with a digit)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def _type(t: DataType, name: str, path: str) -> Any:
    for cls, avro in _SIMPLE:
        if isinstance(t, cls):
            return avro
    if isinstance(t, DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}
    if isinstance(t, ArrayType):
        return {"type": "array", "items": _nullable(_type(t.elementType, name, f"{path}[]"),
                                                    t.containsNull)}
    if isinstance(t, MapType):
        if not isinstance(t.keyType, StringType):
            raise SchemaError(f"{path}: a map with {t.keyType.simpleString()} keys has no Avro "
                              "type (Avro maps have string keys)")
        return {"type": "map", "values": _nullable(_type(t.valueType, name, f"{path}{{}}"),
                                                   t.valueContainsNull)}
    if isinstance(t, StructType):
        return _record(t, name, path)
    raise SchemaError(f"{path}: a {t.simpleString()} has no Avro type")


def _nullable(avro: Any, nullable: bool) -> Any:
    return ["null", avro] if nullable else avro


def _record(t: StructType, name: str, path: str) -> dict[str, Any]:
    fields = []
    for f in t.fields:
        where = f"{path}.{f.name}" if path else f.name
        field: dict[str, Any] = {"name": f.name, "type": _nullable(
            _type(f.dataType, f"{name}_{avro_name(f.name)}", where), f.nullable)}
        if f.nullable:
            field["default"] = None
        fields.append(field)
    return {"type": "record", "name": name, "fields": fields}


def avro_schema(struct: StructType, full_name: str) -> str:
    """The Avro record schema (JSON text) of rows of ``struct``, named ``full_name``
    (``namespace.Name``); a type Avro has none for is a :class:`SchemaError` naming the field."""
    namespace, _, name = full_name.rpartition(".")
    record = _record(struct, avro_name(name), "")
    if namespace:
        record = {"type": "record", "name": record["name"], "namespace": namespace,
                  "fields": record["fields"]}
    return json.dumps(record)


def _converter(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What makes a value of Arrow type ``t`` as ``to_pylist`` gives it fit fastavro's writer
    (a map is a list of pairs there, a dict here); None where nothing needs doing."""
    if pa.types.is_map(t):
        inner = _converter(t.item_type)
        if inner is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: None if v is None else {k: inner(x) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _converter(t.value_type)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if pa.types.is_struct(t):
        inner_fields = [(t.field(i).name, _converter(t.field(i).type))
                        for i in range(t.num_fields)]
        if all(c is None for _, c in inner_fields):
            return None
        return lambda v: None if v is None else {
            k: (c(v[k]) if c is not None else v[k]) for k, c in inner_fields}
    return None


class AvroEncoder:
    """Encodes batches of rows (an Arrow struct array) as records of one writer schema, framed
    with its id (None: plain Avro binary)."""

    def __init__(self, schema: str, schema_id: int | None, rows: pa.DataType) -> None:
        self.schema = parse(schema, "the writer schema")
        self.schema_id = schema_id
        self.convert = _converter(rows)

    def one(self, row: dict[str, Any]) -> bytes:
        """One row's record (a row the schema cannot take is a :class:`SchemaError`)."""
        out = io.BytesIO()
        try:
            fastavro_module().schemaless_writer(out, self.schema, row)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise SchemaError(f"a row does not fit the writer schema: {exc}") from None
        payload = out.getvalue()
        return payload if self.schema_id is None else frame(self.schema_id, payload)

    def encode(self, rows: pa.Array) -> pa.Array:
        """The records of ``rows`` (a NULL row stays NULL: a tombstone), written one after the
        other into one buffer, each after its header."""
        values = rows.to_pylist()
        if self.convert is not None:
            values = [self.convert(v) for v in values]
        header = b"" if self.schema_id is None else frame(self.schema_id, b"")
        out = io.BytesIO()
        write, put, tell = fastavro_module().schemaless_writer, out.write, out.tell
        ends = []
        for row in values:
            if row is not None:
                put(header)
                try:
                    write(out, self.schema, row)
                except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
                    self.one(row)  # raises the row's own sentence
                    raise
            ends.append(tell())
        valid = None if rows.null_count == 0 else np.array([v is not None for v in values])
        return packed(out.getbuffer(), ends, valid)


def encode_reference(encoder: AvroEncoder, rows: list[dict[str, Any] | None]) -> list[bytes | None]:
    """:meth:`AvroEncoder.encode` a row at a time, from Python rows."""
    out: list[bytes | None] = []
    for row in rows:
        if row is None:
            out.append(None)
            continue
        fixed = encoder.convert(row) if encoder.convert is not None else row
        out.append(encoder.one(fixed))
    return out
