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

The ``sqe-hop`` sink's write task keys its own rows the same way (:func:`keyed_task`): the
task's partition, and its rows sorted by the Kafka states' records (value, then key); a task
holds its rows in memory to sort them, as a stateful operator's output of one partition is.

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

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, VariantType

from sqe.errors import StateError, WireError
from sqe.wire.columns import CARRIED

__all__ = ["INDEX_BITS", "batch_keyed", "batch_offset", "keyed_task", "keyed_task_reference"]

#: The bits of a batch key's offset that number the rows of one partition of one batch.
INDEX_BITS = 28
#: ``monotonically_increasing_id()``: the partition above bit 33, the row's place below it.
_ID_BITS = 33


def batch_offset(batch_id: int, index: int) -> int:
    """The offset of the ``index``-th row of a partition of batch ``batch_id``."""
    if not 0 <= index < 1 << INDEX_BITS:
        raise WireError(f"row {index} of a partition is beyond {1 << INDEX_BITS} rows a batch")
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


def keyed_task(batches: Sequence[pa.RecordBatch], states: Sequence[str], pid: int,
               partition: int, batch_id: int, where: str) -> list[pa.RecordBatch]:
    """A ``sqe-hop`` write task's rows (``batches``) sorted by the records of the Kafka states
    whose struct columns ``states`` name (each one's ``_v``, then ``_k``, in turn), with each
    struct's carried fields set to batch ``batch_id``'s keys of task ``partition``
    (:func:`keyed_task_reference`, row by row)."""
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    if table.num_rows > 1 << INDEX_BITS:
        raise StateError(f"{where}: a task of the batch has {table.num_rows} rows, more than "
                         f"the {1 << INDEX_BITS} its keys can number")
    order = {f"{i}{f}": pc.struct_field(table.column(name), f)
             for i, name in enumerate(states) for f in ("_v", "_k")}
    table = table.take(pc.sort_indices(pa.table(order), sort_keys=[  # nulls last
        (k, "ascending") for k in order]))
    n = table.num_rows
    keys = {CARRIED[0]: np.full(n, pid, np.int64), CARRIED[1]: np.full(n, partition, np.int32),
            CARRIED[2]: np.arange(n, dtype=np.int64) + (batch_id << INDEX_BITS)}
    for name in states:
        struct = table.column(name).combine_chunks()
        children = [pa.array(keys[f.name], f.type) if f.name in keys else struct.field(f.name)
                    for f in struct.type]
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.StructArray.from_arrays(children, fields=list(struct.type),
                                                            mask=struct.is_null()))
    return table.to_batches()


def keyed_task_reference(rows: Sequence[dict[str, Any]], states: Sequence[str], pid: int,
                         partition: int, batch_id: int) -> list[dict[str, Any]]:
    """:func:`keyed_task` row by row (Python rows as ``to_pylist`` gives them), for tests."""
    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        parts = [row[name] or {} for name in states]
        return tuple((p.get(f) is None, p.get(f) or b"") for p in parts for f in ("_v", "_k"))

    keyed = []
    for i, row in enumerate(sorted(rows, key=order)):
        new = dict(row)
        for name in states:
            if row[name] is not None:
                new[name] = {**row[name], CARRIED[0]: pid, CARRIED[1]: partition,
                             CARRIED[2]: batch_offset(batch_id, i)}
        keyed.append(new)
    return keyed
