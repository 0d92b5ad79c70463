"""The executor side of a one-pass batch over made-up Arrow batches (no Spark): counts, marks,
refusals, each state's task run once over all its rows in a thread of its own, and a state's
error raised in the Spark task."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from sqe.engine.batch.one_pass_task import merge_results, pass_task
from sqe.wire.columns import TALLY

_RAW = pa.struct([("x", pa.int64())])


def _batch(offsets: list[int], pids: list[int | None], kept: list[int | None],
           refused: bool = False) -> pa.RecordBatch:
    """Rows as the one-pass plan makes them: a row per record, with the state's columns where
    the state's query keeps it (``kept``: its value, or None)."""
    n = len(offsets)
    cols = {"_sqe_bad": pa.array([False] * n)}
    for name, values, kind in (("_offset", offsets, pa.int64()), ("_pid", pids, pa.int64()),
                               ("_source_partition", [0] * n, pa.int32()),
                               ("_source_offset", offsets, pa.int64())):
        cols[f"_sqe_raw{name}"] = pa.array(values, kind)
    for name in TALLY:
        cols[f"_sqe_raw{name}"] = pa.array([None] * n, pa.int64())
    cols["_sqe_state0"] = pa.array([None if x is None else {"x": x} for x in kept], _RAW)
    cols["_sqe_refused0"] = pa.array([refused and x is not None for x in kept])
    return pa.RecordBatch.from_pydict(cols)


def _rows() -> list[pa.RecordBatch]:
    return [_batch([5, 6, 7], [7, 7, 7], [1, None, 3]), _batch([9], [None], [1])]


def _counting(seen: list[int], calls: list[str]):
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        calls.append(threading.current_thread().name)
        n = 0
        for b in batches:
            seen.extend(b.column("x").to_pylist())
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"written": [n], "data": [b"csv" * n]})
    return task


def test_each_state_task_runs_once_in_a_thread_over_all_its_rows():
    seen: list[int] = []
    calls: list[str] = []
    [out] = list(pass_task([(0, _counting(seen, calls))], 0)(iter(_rows())))
    result = merge_results(out.to_pylist(), 0)
    assert calls == ["sqe-one-pass-state"] and seen == [1, 3, 1]
    assert (result.records, result.unparseable_keys, result.refused) == (4, 1, 0)
    assert result.marks == {(7, 0): 7}
    assert result.states == {0: {"written": 3}} and result.data == {0: [b"csvcsvcsv"]}
    assert json.loads(out.column("result")[0].as_py())["records"] == 4


def test_rows_packed_in_one_struct_column_read_as_the_columns():
    """The planned frame gives a task each row as one struct column (``_sqe_row``)."""
    def packed(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([batch.to_struct_array()], names=["_sqe_row"])

    results = []
    for rows in (_rows(), [packed(b) for b in _rows()]):
        seen: list[int] = []
        [out] = list(pass_task([(0, _counting(seen, []))], 0)(iter(rows)))
        results.append((seen, out.to_pylist()))
    assert results[0] == results[1] and results[0][0] == [1, 3, 1]


def test_a_refused_row_writes_nothing_and_counts_are_whole():
    seen: list[int] = []
    rows = [_batch([5], [7], [1], refused=True), *_rows()]
    [out] = list(pass_task([(0, _counting(seen, []))], 0)(iter(rows)))
    result = merge_results(out.to_pylist(), 0)
    assert seen == [] and result.refused == 1 and result.records == 5


def test_a_state_task_that_fails_fails_the_spark_task_and_leaves_no_thread():
    def fails(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        next(batches)
        raise RuntimeError("the state is away")
        yield  # a generator

    def stops_early(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        next(batches)  # reads one batch, then ends without the rest
        yield pa.RecordBatch.from_pydict({"written": [1]})

    many = _rows() * 20  # more than the feed holds at once
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="the state is away"):
        list(pass_task([(0, fails)], 0)(iter(many)))
    [out] = list(pass_task([(0, stops_early)], 0)(iter(many)))
    assert merge_results(out.to_pylist(), 0).states == {0: {"written": 1}}
    assert threading.active_count() == before


def test_the_marks_kernel_equals_its_row_by_row_reference():
    import numpy as np

    from sqe.engine.batch.one_pass_task import add_marks, add_marks_reference

    rng = np.random.default_rng(45)
    for n in (0, 1, 7, 500, 20_000):
        pid = rng.choice([3, 7, 2**40], n).astype(np.int64)
        part = rng.integers(0, 5, n).astype(np.int32)
        offset = rng.integers(0, 10**12, n).astype(np.int64)
        if n > 100:  # runs of one pair, as a writer's partition holds them
            order = np.lexsort((offset, part, pid))
            pid, part, offset = pid[order], part[order], offset[order]
        before = {(3, 0): 10**13, (7, 1): -1}
        fast, slow = dict(before), dict(before)
        add_marks(fast, pid, part, offset)
        add_marks_reference(slow, pid, part, offset)
        assert fast == slow


def test_the_pass_returns_its_marks_and_its_data_rows():
    seen: list[int] = []
    [out] = list(pass_task([(0, _counting(seen, []))], 0)(iter(_rows())))
    rows = out.to_pylist()
    assert [r["state"] for r in rows] == [None, 0] and rows[1]["data"] == b"csv" * 3
    assert json.loads(rows[0]["result"])["marks"] == [[7, 0, 7]]


@pytest.mark.spark
def test_a_planned_task_makes_each_batch_states_tasks_from_the_local_property(spark):
    """A stream planned with its task: the states the driver names in the batch's local
    property run, each made from its context; a job without the property fails in a sentence."""
    from sqe.engine.batch.one_pass_task import RESULT_SCHEMA, planned_task

    class Given:  # a sink's copy, as the plan pickles it
        def __init__(self, name: str) -> None:
            self.name = name

        def pass_task(self, context):
            def task(batches):
                n = sum(b.num_rows for b in batches)
                yield pa.RecordBatch.from_pydict({"written": [n * context["times"]]})
            return task

    key = "sqe.onePass.test"
    frame = spark.createDataFrame(pa.Table.from_batches(_rows()[:1]))
    tasks = frame.coalesce(1).mapInArrow(
        planned_task([(0, Given("a")), (1, Given("b"))], 0, key), RESULT_SCHEMA)
    spark.sparkContext.setLocalProperty(key, json.dumps({"0": {"times": 10}}))
    try:
        result = merge_results(tasks.collect(), 0)
        assert result.records == 3 and result.states == {0: {"written": 20}}  # b not written
        spark.sparkContext.setLocalProperty(key, None)
        with pytest.raises(Exception, match="without its batch's local property sqe.onePass.test"):
            tasks.collect()
    finally:
        spark.sparkContext.setLocalProperty(key, None)
