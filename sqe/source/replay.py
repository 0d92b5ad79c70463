"""The replay filter: drop records at or below the high-water mark of their (pid, partition).

Owns the replay rule as a pure function over one Kafka
partition's records in offset order:

    keep a record  <=>  its key cannot be judged (NULL, not 20 bytes, or a
                        negative source partition or offset: :func:`judgeable`),
                        or its source offset is strictly greater than both the
                        stored HWM of its (pid, partition) and every offset
                        kept earlier in the same call.

A key that cannot be judged is passed through and never becomes a mark.  The
guard :func:`beyond_bound` finds keys that claim an offset more than
``jw.sqe.spout.kafka.filterReplays.maxAdvance`` above the mark their
(pid, partition) had when the batch began (-1 without one): such a key, forged or
corrupt, would move the mark so far that every good record after it became a
"replay".  The caller rejects those records (the bad-record policy) before the
filter runs, so they never move a mark.

Because a dropped record's offset is never above the running threshold, the
threshold before record *i* of a group is ``max(HWM, max of all earlier
offsets of the group)``; :func:`filter_replays` computes it with a cumulative
maximum per group (a loop over the few distinct groups, never over rows),
grouping the rows by :func:`pair_groups` (no sort at all for the usual single
pair).  :func:`filter_replays_reference` is the plain-Python reference
the tests hold it equal to.  :func:`filter_replays_frame` is the same rule
as a Spark DataFrame stage (built-ins: a window maximum and a broadcast join
of the HWMs), for records read by Spark's own Kafka connector.

Example::

    >>> from sqe.wire.keys import encode_keys
    >>> keys = encode_keys([7] * 5, [0] * 5, [0, 1, 1, 2, 0])
    >>> keep, hwm = filter_replays(keys, {})
    >>> keep.tolist(), hwm
    ([True, True, False, True, False], {(7, 0): 2})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F

from sqe.wire.keys import KEY_SIZE, StreamMetadata, decode_keys

__all__ = [
    "DEFAULT_MAX_ADVANCE", "Hwm", "beyond_bound", "beyond_bound_frame", "beyond_bound_reason",
    "beyond_bound_reference",
    "filter_replays", "filter_replays_decoded", "filter_replays_frame",
    "filter_replays_reference", "judgeable", "judgeable_column", "pair_groups",
]

#: High-water marks: (pid, source partition) -> highest source offset processed.
Hwm = Mapping[tuple[int, int], int]

#: The default of ``jw.sqe.spout.kafka.filterReplays.maxAdvance``: 2**40 source offsets, far
#: beyond what one batch of a heavily filtered upstream skips, far below a forged 2**63-1.
DEFAULT_MAX_ADVANCE = 2**40


def judgeable(part: np.ndarray, off: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Which decoded keys the replay filter judges: 20 bytes (``valid``) naming a source
    partition and offset that are not negative (no writer makes others)."""
    return valid & (part >= 0) & (off >= 0)


def judgeable_column(key_valid: Any, part: Any, off: Any) -> Any:
    """:func:`judgeable` as a Spark column over decoded key columns."""
    return key_valid & (part >= 0) & (off >= 0)


def pair_groups(pid: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (pid, partition) pairs of the rows, as a (k, 2) int64 array in sorted
    order, and for each row the index of its pair (``np.unique(..., axis=0,
    return_inverse=True)``, which the tests hold it equal to).

    Records of one Kafka partition come in runs of one pair (a writer keeps a source
    partition in one destination partition, in order), so the pairs are found from the
    heads of the runs: one pass over the rows and a sort of the few heads, where
    ``np.unique(..., axis=0)`` sorts every row as raw bytes (0.2 s per 100,000 rows).
    """
    n = len(pid)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.intp)
    p64, q64 = np.asarray(pid, dtype=np.int64), np.asarray(part, dtype=np.int64)
    head = np.ones(n, dtype=bool)
    head[1:] = (p64[1:] != p64[:-1]) | (q64[1:] != q64[:-1])
    starts = np.flatnonzero(head)
    hp, hq = p64[starts], q64[starts]
    # The heads' pairs as one integer each, in (pid, partition) order, from the few distinct
    # pids and partitions (np.unique sorts values, never argsorts rows): when the pairs
    # interleave row by row every row is a head, and a lexsort of the heads on two keys cost
    # more than the rest of the filter.
    up, uq = _distinct(hp), _distinct(hq)
    code = _index_in(hp, up) * len(uq) + _index_in(hq, uq)
    if len(up) * len(uq) <= max(4 * len(starts), 1 << 16):  # a table of the cells
        present = np.zeros(len(up) * len(uq), dtype=bool)
        present[code] = True
        cells = np.flatnonzero(present)
        group_of_head = (np.cumsum(present) - 1)[code]
    else:
        cells, group_of_head = np.unique(code, return_inverse=True)
    groups = np.stack([up[cells // len(uq)], uq[cells % len(uq)]], axis=1)
    if len(starts) == n:  # every row heads its own run
        return groups, group_of_head.astype(np.intp, copy=False)
    run_of_row = np.cumsum(head) - 1
    return groups, group_of_head[run_of_row].astype(np.intp, copy=False)


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values (``np.unique``, by a plain sort: no inverse, no argsort)."""
    s = np.sort(values)
    return s[np.r_[True, s[1:] != s[:-1]]]


def _index_in(values: np.ndarray, distinct: np.ndarray) -> np.ndarray:
    """For each value its index in ``distinct`` (sorted, holding every value): a few
    comparisons for a few distinct values, a table for a narrow range, else a binary search."""
    if len(distinct) <= 8:
        index = np.zeros(len(values), dtype=np.intp)
        for d in distinct[1:]:
            index += values >= d
        return index
    low, span = distinct[0], int(distinct[-1]) - int(distinct[0])  # Python ints: no overflow
    if span < max(4 * len(values), 1 << 16):
        table = np.zeros(span + 1, dtype=np.intp)
        table[distinct - low] = np.arange(len(distinct))
        return table[values - low]
    return np.searchsorted(distinct, values)


def _group_order(inverse: np.ndarray, groups: int) -> np.ndarray:
    """A stable sort of the rows by their group index: NumPy's stable sort is a radix sort
    for 8- and 16-bit integers (linear time) and a merge sort for wider ones."""
    if groups <= 1 << 8:
        return np.argsort(inverse.astype(np.uint8), kind="stable")
    if groups <= 1 << 16:
        return np.argsort(inverse.astype(np.uint16), kind="stable")
    return np.argsort(inverse, kind="stable")


def beyond_bound(pid: np.ndarray, part: np.ndarray, off: np.ndarray, judged: np.ndarray,
                 start: Hwm, bound: int) -> np.ndarray:
    """Which records claim a source offset more than ``bound`` above the mark their
    (pid, partition) had when the batch began (``start``; -1 for a group without one).

    A loop over the distinct groups, never over rows.
    """
    out = np.zeros(len(off), dtype=bool)
    rows = np.flatnonzero(judgeable(part, off, judged))
    if rows.size == 0:
        return out
    groups, inverse = pair_groups(pid[rows], part[rows])
    marks = np.array([start.get((int(p), int(q)), -1) for p, q in groups], dtype=np.int64)
    # off - mark > bound  <=>  off > mark and off - (mark + 1) >= bound: with off >= 0 and
    # mark >= -1 the difference of two non-negative int64 never overflows
    floor = np.minimum(marks[inverse], np.iinfo(np.int64).max - 1) + 1
    o = off[rows]
    out[rows] = (o >= floor) & (o - floor >= bound)
    return out


def _judged(key: bytes | None) -> StreamMetadata | None:
    """The StreamMetadata of a key the filter judges (scalar :func:`judgeable`), else None."""
    if key is None or len(key) != KEY_SIZE:
        return None
    m = StreamMetadata.from_bytes(key)
    return m if m.partition >= 0 and m.offset >= 0 else None


def beyond_bound_reference(keys: Iterable[bytes | None], start: Hwm, bound: int) -> list[bool]:
    """Scalar reference of :func:`beyond_bound`, one key at a time."""
    return [m is not None and m.offset - start.get((m.pid, m.partition), -1) > bound
            for m in map(_judged, keys)]


def filter_replays(
    keys: pa.Array | pa.ChunkedArray, hwm: Hwm
) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
    """Vectorised replay filter: ``(keep mask, new HWMs)`` for keys in offset order.

    ``new HWMs`` holds every entry of ``hwm`` plus, for each (pid, partition)
    with a kept record, the larger of its old mark and its largest kept offset.
    ``hwm`` itself is not modified.
    """
    return filter_replays_decoded(*decode_keys(keys), hwm)


def filter_replays_decoded(
    pid: np.ndarray, part: np.ndarray, off: np.ndarray, valid: np.ndarray, hwm: Hwm
) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
    """:func:`filter_replays` over keys already split by :func:`~sqe.wire.keys.decode_keys`.

    For callers that decoded the keys for other uses too, so they are decoded once.
    """
    keep = np.ones(len(off), dtype=bool)
    new_hwm = dict(hwm)
    rows = np.flatnonzero(judgeable(part, off, valid))
    if rows.size == 0:
        return keep, new_hwm
    if rows.size == len(off):  # every key judged: no copies
        rows_pid, rows_part, rows_off = pid, part, off
    else:
        rows_pid, rows_part, rows_off = pid[rows], part[rows], off[rows]
    groups, inverse = pair_groups(rows_pid, rows_part)
    if len(groups) == 1:  # the common case: one pair, already in offset order
        order = np.arange(len(rows))
    else:  # stable: offset order is kept inside each group
        order = _group_order(inverse, len(groups))
    so = rows_off[order]
    starts = np.r_[0, np.cumsum(np.bincount(inverse, minlength=len(groups)))[:-1]]
    kept_sorted = np.empty(len(order), dtype=bool)
    for g, (begin, end) in enumerate(zip(starts, np.r_[starts[1:], len(order)], strict=True)):
        group = (int(groups[g, 0]), int(groups[g, 1]))
        mark = hwm.get(group)
        seg = so[begin:end]
        kept = kept_sorted[begin:end]
        kept[0] = True  # the first record of a group: only a stored mark can drop it
        kept[1:] = seg[1:] > np.maximum.accumulate(seg)[:-1]  # above every earlier offset
        if mark is None:
            new_hwm[group] = int(seg.max())
        else:
            kept &= seg > mark
            new_hwm[group] = max(int(mark), int(seg.max()))
    keep[rows[order]] = kept_sorted
    return keep, new_hwm


def filter_replays_reference(
    keys: Iterable[bytes | None], hwm: Hwm
) -> tuple[list[bool], dict[tuple[int, int], int]]:
    """Scalar reference of :func:`filter_replays`: one row at a time, plain Python."""
    marks = dict(hwm)
    keep = []
    for m in map(_judged, keys):
        if m is None:  # NULL, not 20 bytes, or naming what no writer makes: passed through
            keep.append(True)
            continue
        group = (m.pid, m.partition)
        if group in marks and m.offset <= marks[group]:
            keep.append(False)
            continue
        keep.append(True)
        marks[group] = m.offset
    return keep, marks


def _with_marks(frame: Any, hwm: Hwm, bound: int | None) -> Any:
    """``frame`` joined with its rows' marks (``_hwm``) and, with ``bound``, a column
    ``_sqe_beyond``: the row's source offset lies more than ``bound`` above its mark."""
    spark = frame.sparkSession
    marks = spark.createDataFrame(
        [(int(p), int(q), int(o)) for (p, q), o in hwm.items()],
        "_hwm_pid long, _hwm_partition int, _hwm long",
    )
    joined = frame.join(
        F.broadcast(marks),
        (frame["_pid"] == marks["_hwm_pid"]) & (frame["_source_partition"] == marks["_hwm_partition"]),
        "left",
    )
    if bound is None:
        return joined.withColumn("_sqe_beyond", F.lit(False))
    # the same arithmetic as beyond_bound: no int64 overflow under ANSI mode
    floor = F.least(F.coalesce(F.col("_hwm"), F.lit(-1)), F.lit(2**63 - 2)) + 1
    off = F.col("_source_offset")
    beyond = off.isNotNull() & (off >= floor) & ((off - floor) >= F.lit(bound))
    return joined.withColumn("_sqe_beyond", beyond)


def beyond_bound_reason(bound: int) -> str:
    """Why a record :func:`beyond_bound_frame` finds is a bad record."""
    return (f"its key claims a source offset more than jw.sqe.spout.kafka.filterReplays."
            f"maxAdvance ({bound}) above the mark its (pid, partition) had when the batch "
            "began; as a mark it would drop every good record after it as a replay")


def beyond_bound_frame(frame: Any, hwm: Hwm, bound: int) -> Any:
    """The rows of ``frame`` (source columns) that :func:`beyond_bound` finds, as a DataFrame."""
    joined = _with_marks(frame, hwm, bound)
    return joined.where("_sqe_beyond").select(*[joined[c] for c in frame.columns])


def filter_replays_frame(frame: Any, hwm: Hwm, bound: int | None = None) -> Any:
    """The replay filter as a DataFrame stage over the source columns.

    ``frame`` has ``_topic``, ``_partition``, ``_offset`` and the decoded
    ``_pid``, ``_source_partition``, ``_source_offset`` (NULL for keys that
    cannot be judged).  Within each Kafka partition and (pid, source
    partition), ordered by Kafka offset, a record is kept iff its source
    offset is above the HWM and above every earlier source offset.  With
    ``bound``, rows :func:`beyond_bound_frame` finds are left out and judge nothing
    (the caller rejects them).
    """
    group = ["_topic", "_partition", "_pid", "_source_partition"]
    earlier = Window.partitionBy(*group).orderBy("_offset").rowsBetween(
        Window.unboundedPreceding, -1)
    joined = _with_marks(frame, hwm, bound).withColumn(
        "_sqe_before", F.max(F.when(~F.col("_sqe_beyond"), F.col("_source_offset"))).over(earlier))
    threshold = F.greatest(F.col("_hwm"), F.col("_sqe_before"))  # NULLs are skipped
    keep = ~F.col("_sqe_beyond") & (
        F.col("_pid").isNull() | threshold.isNull() | (F.col("_source_offset") > threshold))
    # The window shuffles by group; each group stays in one Spark partition, and sorting
    # within partitions restores Kafka offset order there.
    kept = joined.where(keep).select(*[joined[c] for c in frame.columns])
    return kept.sortWithinPartitions("_topic", "_partition", "_offset")
