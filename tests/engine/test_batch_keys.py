"""The keys of rows no single record stands behind (:mod:`sqe.engine.batch.keys`): the
``sqe-hop`` sink task's vectorised keying held equal to its row-by-row reference."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.engine.batch.keys import INDEX_BITS, batch_offset, keyed_task, keyed_task_reference
from sqe.errors import StateError

STRUCT = pa.struct([("_k", pa.binary()), ("_v", pa.binary()), ("_sqe_pid", pa.int64()),
                    ("_sqe_partition", pa.int32()), ("_sqe_offset", pa.int64())])
record = st.one_of(st.none(), st.fixed_dictionaries({
    "_k": st.one_of(st.none(), st.binary(max_size=3)), "_v": st.binary(max_size=4),
    "_sqe_pid": st.none(), "_sqe_partition": st.none(), "_sqe_offset": st.none()}))
row = st.fixed_dictionaries({"other": st.integers(0, 9), "s0": record, "s1": record})


def _batches(rows: list[dict[str, Any]], cut: int) -> list[pa.RecordBatch]:
    schema = pa.schema([("other", pa.int64()), ("s0", STRUCT), ("s1", STRUCT)])
    table = pa.Table.from_pylist(rows, schema)
    cut = min(cut, len(rows))
    return [b for b in (table.slice(0, cut), table.slice(cut)) if b.num_rows
            for b in b.to_batches()]


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=30), st.integers(0, 30), st.sampled_from([["s0"], ["s1", "s0"]]),
       st.integers(0, 3), st.integers(0, 1000))
def test_a_tasks_rows_are_keyed_as_row_by_row(rows, cut, states, partition, batch_id):
    got = keyed_task(_batches(rows, cut), states, 7, partition, batch_id, "here")
    table = pa.Table.from_batches(got) if got else None
    want = keyed_task_reference(rows, states, 7, partition, batch_id)
    assert (table.to_pylist() if table is not None else []) == want


def test_the_offsets_are_the_batchs_and_a_task_beyond_them_fails():
    assert batch_offset(3, 5) == 3 << INDEX_BITS | 5
    with pytest.raises(ValueError):
        batch_offset(3, 1 << INDEX_BITS)

    rows = pa.Table.from_pylist([{"other": 1, "s0": None, "s1": None}],
                                pa.schema([("other", pa.int64()), ("s0", STRUCT),
                                           ("s1", STRUCT)]))
    # the count alone is checked, before anything is sorted
    many = rows.take([0] * 1024).to_batches() * ((1 << INDEX_BITS) // 1024 + 1)
    with pytest.raises(StateError, match="hop h batch 3: a task of the batch has"):
        keyed_task(many, ["s0"], 7, 0, 3, "hop h batch 3")
