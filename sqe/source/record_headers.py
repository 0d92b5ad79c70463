"""A record's Kafka headers as a column (``jw.sqe.spout.kafka.includeHeaders``).

With the option, the ``sqe-kafka`` source yields each record's headers as :data:`HEADERS`,
an array of ``struct<key: string, value: binary>`` in the order the producer gave them (a key
may repeat), as Spark's own Kafka source's ``headers`` column; a record without headers has an
empty array.  A query reads one with Spark's built-ins, e.g. the first value of a key:
``{sql: "try_element_at(filter(_headers, h -> h.key = 'trace-id'), 1).value"}``.  Reading headers
costs each record a Python call in the source, so a stream reads them only when asked.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    StringType,
    StructField,
    StructType,
)

from sqe.wire.columns import HEADERS

__all__ = ["ARROW_TYPE", "HEADERS", "SPARK_TYPE", "headers_array", "schema_with_headers",
           "with_headers"]

SPARK_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                   StructField("value", BinaryType())]))
ARROW_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def headers_array(headers: Sequence[Sequence[tuple[str, bytes | None]] | None]) -> pa.Array:
    """The :data:`HEADERS` column of records whose headers confluent-kafka gave as
    ``headers`` (a list of ``(key, value)`` pairs, or None for none)."""
    return pa.array([[{"key": k, "value": v} for k, v in h] if h else [] for h in headers],
                    type=ARROW_TYPE)


def schema_with_headers(schema: StructType, enabled: bool) -> StructType:
    """The source's ``schema`` with the :data:`HEADERS` column when the stream reads them."""
    return StructType([*schema.fields, StructField(HEADERS, SPARK_TYPE, True)]) if enabled \
        else schema


def with_headers(batch: pa.RecordBatch, enabled: bool, headers: pa.Array | None = None
                 ) -> pa.RecordBatch:
    """``batch`` with its :data:`HEADERS` column: ``headers``, or NULLs (a tally row)."""
    if not enabled:
        return batch
    return batch.append_column(HEADERS, headers if headers is not None
                               else pa.nulls(batch.num_rows, ARROW_TYPE))
