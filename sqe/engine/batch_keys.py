"""StreamMetadata for rows no single record stands behind: what a stateful operator emits.

A Kafka state keys each record by the StreamMetadata its row carries (``_sqe_pid``,
``_sqe_partition``, ``_sqe_offset``: the hop's pid, the source partition and offset), and the
next hop drops every record at or below the mark of its (pid, partition).  A window's sum or a
join's row comes from many records, so :func:`batch_keyed` gives it a key of the batch instead:

* ``_sqe_pid``: the hop's pid, as a row-wise row's;
* ``_sqe_partition``: the Spark partition the row is in.  A stateful operator keeps each group
  in one partition of its state, batch after batch, so a group's rows share a partition (and so
  a Kafka partition of the next topic, by SQE's partitioner) and stay in order;
* ``_sqe_offset``: ``batch_id << INDEX_BITS | i``, ``i`` the row's place in its partition with
  the partition's rows sorted by their values.

Every batch's offsets lie above every earlier batch's, so the next hop passes each batch's rows
once; a batch that Spark runs again after a failure makes the same rows (its input filtered by
the same marks, :mod:`sqe.source.read_report`) with the same keys, so whatever its first attempt
wrote is dropped there as replays.  That asks of the transform what Spark's own recovery asks:
deterministic rows, in a partitioning by value (a hash, not ``repartition(n)`` round robin).

Example (the key of the third row of partition 1 of batch 5)::

    >>> batch_offset(5, 2) == (5 << INDEX_BITS) | 2
    True
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, VariantType

from sqe.wire.columns import CARRIED

__all__ = ["INDEX_BITS", "batch_keyed", "batch_offset"]

#: The bits of a batch key's offset that number the rows of one partition of one batch.
INDEX_BITS = 28
#: ``monotonically_increasing_id()``: the partition above bit 33, the row's place below it.
_ID_BITS = 33


def batch_offset(batch_id: int, index: int) -> int:
    """The offset of the ``index``-th row of a partition of batch ``batch_id``."""
    if not 0 <= index < 1 << INDEX_BITS:
        raise ValueError(f"row {index} of a partition is beyond {1 << INDEX_BITS} rows a batch")
    return (batch_id << INDEX_BITS) | index


def batch_keyed(frame: DataFrame, pid: int, batch_id: int, where: str) -> DataFrame:
    """``frame`` with the carried columns of batch ``batch_id``'s keys (module docstring), its
    partitions sorted by their rows' values; a partition of more rows than an offset numbers
    fails the batch naming ``where``."""
    orderable = [f.name for f in frame.schema.fields
                 if not isinstance(f.dataType, (MapType, VariantType))]
    ordered = frame.sortWithinPartitions(*orderable) if orderable else frame
    row_id = F.monotonically_increasing_id()
    index = F.col("_sqe_row_id").bitwiseAND(F.lit((1 << _ID_BITS) - 1))
    too_many = F.raise_error(F.lit(f"{where}: a partition of the batch has more than "
                                   f"{1 << INDEX_BITS} rows, more than its keys can number"))
    return (ordered.withColumn("_sqe_row_id", row_id)
            .withColumns({
                CARRIED[0]: F.lit(pid).cast("long"),
                CARRIED[1]: F.shiftright(F.col("_sqe_row_id"), _ID_BITS).cast("int"),
                CARRIED[2]: F.when(index < F.lit(1 << INDEX_BITS),
                                   F.lit(batch_id << INDEX_BITS).cast("long") + index)
                .otherwise(too_many.cast("long"))})
            .drop("_sqe_row_id"))
