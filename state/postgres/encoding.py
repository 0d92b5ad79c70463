"""How a query's rows travel to the Postgres state: the column type of each Spark type, and
each field as Postgres parses it from CSV, built by Arrow in the executors' tasks (no
row-by-row INSERT, no per-row Python)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.config.worker_task import begin_task
from sqe.wire.arrays import binaries, from_numpy
from sqe.wire.columns import field_column

__all__ = ["csv_column", "csv_task", "pass_csv", "pg_type"]


def pg_type(dtype: T.DataType) -> str:
    """The Postgres column type a Spark type is stored as."""
    simple: list[tuple[type, str]] = [
        (T.StringType, "text"), (T.LongType, "bigint"), (T.IntegerType, "integer"),
        (T.ShortType, "smallint"), (T.ByteType, "smallint"), (T.DoubleType, "double precision"),
        (T.FloatType, "real"), (T.BooleanType, "boolean"), (T.DateType, "date"),
        (T.TimestampNTZType, "timestamp"), (T.TimestampType, "timestamptz"),
        (T.BinaryType, "bytea"), (T.NullType, "text"),
    ]
    for cls, name in simple:
        if isinstance(dtype, cls):
            return name
    if isinstance(dtype, T.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    if isinstance(dtype, (T.StructType, T.ArrayType, T.MapType, T.VariantType)):
        return "jsonb"
    return "text"


def csv_column(df: DataFrame, name: str) -> Column:
    """``name`` in the form Postgres parses from CSV (bytea as hex, nested values as JSON)."""
    dtype = df.schema[name].dataType
    col = field_column(name)
    if isinstance(dtype, T.BinaryType):
        return F.concat(F.lit("\\x"), F.hex(col)).alias(name)
    if isinstance(dtype, (T.StructType, T.ArrayType, T.MapType, T.VariantType)):
        return F.to_json(col).alias(name)
    if isinstance(dtype, T.NullType):
        return col.cast("string").alias(name)
    return col.alias(name)


def csv_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    begin_task()
    out = io.BytesIO()
    rows = 0
    options = pcsv.WriteOptions(include_header=False)
    for batch in batches:
        if batch.num_rows:
            pcsv.write_csv(batch, out, options)
            rows += batch.num_rows
    yield pa.RecordBatch.from_arrays(
        [binaries([out.getvalue()]), from_numpy(np.array([rows], dtype=np.int64))],
        names=["csv", "rows"])


def pass_csv(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`csv_task` as a one-pass state task: its CSV as ``data``, its rows ``written``."""
    for out in csv_task(batches):
        yield pa.RecordBatch.from_arrays([out.column("csv"), out.column("rows")],
                                         names=["data", "written"])
