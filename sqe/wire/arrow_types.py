"""The Arrow type a Python data source yields for a Spark type, as Spark's own conversion
(``pyspark.sql.pandas.types.to_arrow_type``, whose signature differs between PySpark
releases) gives it: what the ``sqe-kafka`` source's decoded value column is made as
(:mod:`sqe.wire.avro`).  ``tests/wire/test_avro.py`` holds the two equal.

    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> arrow_type(StructType([StructField("n", LongType())]))
    StructType(struct<n: int64>)
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, DecimalType, MapType, StructType

from sqe.errors import ArgumentError

__all__ = ["arrow_type"]

_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(),
    "long": pa.int64(), "float": pa.float32(), "double": pa.float64(), "binary": pa.binary(),
    "string": pa.string(), "void": pa.null(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us")}


def arrow_type(t: DataType) -> pa.DataType:
    """The Arrow type a Python data source yields for Spark type ``t`` (of those
    :func:`spark_type` makes), as Spark's own conversion gives it on every PySpark 4."""
    if isinstance(t, StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType), f.nullable)
                          for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", arrow_type(t.elementType), t.containsNull))
    if isinstance(t, MapType):
        return pa.map_(arrow_type(t.keyType), pa.field("value", arrow_type(t.valueType),
                                                       t.valueContainsNull))
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if t.typeName() not in _ARROW:
        raise ArgumentError(f"SQE has no Arrow type for Spark type {t.simpleString()}")
    return _ARROW[t.typeName()]
