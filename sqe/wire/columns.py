"""The columns SQE's frames carry from the sources through the queries to the states.

* The **record columns** every source yields (:data:`SCHEMA`, and
  :data:`ARROW_SCHEMA`, its exact Arrow twin for ``read()``): the Kafka record
  (``_key``, ``_value``, ``_topic``, ``_partition``, ``_offset``, ``_timestamp``),
  its decoded StreamMetadata key (``_pid``, ``_source_partition``,
  ``_source_offset``, NULL when the key cannot be judged), a chunk message's
  position in its chunk (``_index``) and its filter value (``_filter_value``).
* The **tally**: each source task's counters (:class:`Tally`) travel as one
  extra row whose ``_offset`` is NULL and whose :data:`TALLY` columns hold the
  counts; :func:`data_rows` leaves those rows out.
* The **carried columns** (:data:`CARRIED`): every record's StreamMetadata for
  the next hop (this topology's pid, the source partition and the carried
  offset, :func:`carried_offset`), kept through every query so a Kafka state can
  key its output without the user selecting them.

Example::

    >>> RECORD_COLUMNS[:3]
    ('_key', '_value', '_topic')
    >>> Tally(replays_dropped=2).row("t", 0).column("_replays_dropped").to_pylist()
    [2]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sqe.wire.arrays import from_numpy, repeated
from sqe.wire.keys import CHUNK_INDEX_BITS

__all__ = ["ARROW_SCHEMA", "CARRIED", "HEADERS", "RECORD_COLUMNS", "SCHEMA", "TALLY", "Tally",
           "carried_offset", "data_rows", "field_column", "record_batch"]


@dataclass
class Tally:
    """The counters of one source task (or of one batch, once summed)."""

    replays_dropped: int = 0
    chunks_read: int = 0
    chunks_skipped_bloom: int = 0
    chunks_skipped_hwm: int = 0
    chunks_false_positive: int = 0
    messages_decoded: int = 0
    bytes_decoded: int = 0
    bytes_not_decoded: int = 0
    messages_filtered: int = 0
    dead_letters: int = 0
    keys_beyond_bound: int = 0

    def add(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @classmethod
    def from_row(cls, row: Any) -> Tally:
        """The counts of a row holding the :data:`TALLY` columns (NULL counts as 0)."""
        return cls(**{f.name: row[f"_{f.name}"] or 0 for f in fields(cls)})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def row(self, topic: str, partition: int) -> pa.RecordBatch:
        """The one-row batch that carries these counts to Spark (``_offset`` NULL)."""
        return record_batch(1, {
            "_topic": repeated(topic, 1),
            "_partition": from_numpy(np.array([partition], dtype=np.int32)),
            **{f"_{f.name}": from_numpy(np.array([getattr(self, f.name)], dtype=np.int64))
               for f in fields(self)}})


#: The counter columns, one per :class:`Tally` field.
TALLY = tuple(f"_{f.name}" for f in fields(Tally))

_RECORD = [
    ("_key", BinaryType(), pa.binary()), ("_value", BinaryType(), pa.binary()),
    ("_topic", StringType(), pa.string()), ("_partition", IntegerType(), pa.int32()),
    ("_offset", LongType(), pa.int64()),
    ("_timestamp", TimestampType(), pa.timestamp("us", tz="UTC")),
    ("_pid", LongType(), pa.int64()), ("_source_partition", IntegerType(), pa.int32()),
    ("_source_offset", LongType(), pa.int64()),
    ("_index", IntegerType(), pa.int32()), ("_filter_value", StringType(), pa.string()),
]
#: The columns of a record row (what a post-filter may read).
RECORD_COLUMNS = tuple(name for name, _, _ in _RECORD)
_ALL = [*_RECORD, *[(name, LongType(), pa.int64()) for name in TALLY]]
#: Columns of every source; the Arrow schema below matches it exactly.
SCHEMA = StructType([StructField(name, spark) for name, spark, _ in _ALL])
ARROW_SCHEMA = pa.schema([(name, arrow) for name, _, arrow in _ALL])

def record_batch(n: int, columns: Mapping[str, pa.Array | None]) -> pa.RecordBatch:
    """A batch of ``n`` rows of :data:`ARROW_SCHEMA`; columns not given (or None) are NULL."""
    arrays = [columns.get(f.name) for f in ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(
        [pa.nulls(n, f.type) if a is None else a for a, f in zip(arrays, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA)


#: The column of a record's Kafka headers, for a stream that reads them
#: (:mod:`sqe.source.record_headers`).
HEADERS = "_headers"

#: Columns every record carries from the source to the states: (pid, partition, offset).
CARRIED = ("_sqe_pid", "_sqe_partition", "_sqe_offset")


def field_column(name: str) -> Column:
    """A reference to a field, quoted so names with dots or spaces work."""
    return F.col("`" + name.replace("`", "``") + "`")


def data_rows(df: DataFrame) -> DataFrame:
    """``df`` without tally rows (rows of records have an ``_offset``)."""
    return df.where(df["_offset"].isNotNull())


def carried_offset() -> Column:
    """The offset a record carries to the next hop: its Kafka offset, or for a message of a
    chunk ``offset << 24 | index in the chunk`` (increasing per partition either way)."""
    return F.when(F.col("_index").isNull(), F.col("_offset")).otherwise(
        F.shiftleft(F.col("_offset"), CHUNK_INDEX_BITS) + F.col("_index"))
