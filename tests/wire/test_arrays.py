"""sqe.wire.arrays against the pyarrow calls it stands for, and a worker's path without pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqe.wire import arrays
from sqe.wire.arrays import (
    binaries,
    booleans,
    counts_batch,
    from_numpy,
    inferred,
    packed,
    present,
    repeated,
    scalar,
    strings,
    to_numpy,
    value_offsets,
)

_INTS = {np.int8: pa.int8(), np.int16: pa.int16(), np.int32: pa.int32(), np.int64: pa.int64(),
         np.uint8: pa.uint8(), np.uint64: pa.uint64()}


def _same(got: pa.Array, want: pa.Array) -> None:
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist()
    got.validate(full=True)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=30)), max_size=60))
def test_binaries_equal_pa_array(values):
    _same(binaries(values), pa.array(values, pa.binary()))


@given(st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=60))
def test_strings_equal_pa_array(values):
    _same(strings(values), pa.array(values, pa.string()))


@given(st.text(max_size=10), st.integers(0, 50))
def test_repeated_equals_pa_array_of_a_list(text, n):
    _same(repeated(text, n), pa.array([text] * n, pa.string()))


def test_more_than_2_gib_falls_back_to_pa_array(monkeypatch):
    monkeypatch.setattr(arrays, "_INT32_MAX", 3)
    _same(binaries([b"ab", None, b"cd"]), pa.array([b"ab", None, b"cd"]))
    _same(repeated("ab", 3), pa.array(["ab"] * 3))


@given(st.sampled_from(sorted(_INTS, key=str)), st.data())
def test_from_numpy_equals_pa_array_with_a_mask(dtype, data):
    info = np.iinfo(dtype)
    values = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=40)),
                      dtype=dtype)
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(values),
                                        max_size=len(values))), dtype=bool)
    _same(from_numpy(values), pa.array(values))
    _same(from_numpy(values, valid=valid), pa.array(values, mask=~valid))
    _same(from_numpy(values, _INTS[dtype]), pa.array(values, _INTS[dtype]))


def test_from_numpy_of_a_timestamp_over_int64_and_a_wrong_width():
    us = pa.timestamp("us", tz="UTC")
    _same(from_numpy(np.array([0, 5], dtype=np.int64), us), pa.array(np.array([0, 5]), us))
    with pytest.raises(ValueError, match="int32 values cannot make an Arrow int64"):
        from_numpy(np.zeros(2, dtype=np.int32), pa.int64())


@given(st.lists(st.booleans(), max_size=70), st.data())
def test_booleans_equal_pa_array(values, data):
    mask = np.array(values, dtype=bool)
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(values),
                                        max_size=len(values))), dtype=bool)
    _same(booleans(mask), pa.array(mask))
    _same(booleans(mask, valid), pa.array(mask, mask=~valid))


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), st.integers(0, 45),
       st.integers(0, 45))
def test_to_numpy_of_a_slice_equals_pyarrows(values, start, length):
    arr = pa.array(values, pa.int64()).slice(start, length)
    got = to_numpy(arr)
    assert got.dtype == np.int64
    assert got.tolist() == arr.to_numpy(zero_copy_only=False).tolist()


@given(st.lists(st.booleans(), max_size=70), st.integers(0, 75), st.integers(0, 75))
def test_to_numpy_of_bools_equals_pyarrows(values, start, length):
    arr = pa.array(values, pa.bool_()).slice(start, length)
    got = to_numpy(arr)
    assert got.dtype == np.bool_
    assert got.tolist() == arr.to_numpy(zero_copy_only=False).tolist()


def test_to_numpy_of_chunks_floats_and_refusals():
    chunked = pa.chunked_array([pa.array([1, 2], pa.int32()), pa.array([3], pa.int32())])
    assert to_numpy(chunked).tolist() == [1, 2, 3]
    assert to_numpy(pa.chunked_array([], pa.int32())).dtype == np.int32
    assert to_numpy(pa.array([0.5, 2.0])).tolist() == [0.5, 2.0]
    with pytest.raises(ValueError, match="1 NULLs has no NumPy twin here: fill the NULLs"):
        to_numpy(pa.array([1, None]))
    with pytest.raises(ValueError, match="Arrow string arrays have no NumPy twin"):
        to_numpy(pa.array(["a"]))


@pytest.mark.parametrize("value, type", [
    (b"", pa.binary()), ("eu", pa.string()), (True, pa.bool_()), (-1, pa.int32()),
    (7, pa.int64()), (None, pa.string()), ("eu", None), (3, None), (2.5, None), (False, None),
    (None, None), (b"x", None)])
def test_scalar_equals_pa_scalar(value, type):
    got, want = scalar(value, type), pa.scalar(value, type)
    assert (got.type, got.as_py()) == (want.type, want.as_py())


@pytest.mark.parametrize("values", [["a", "b"], [1, 2], [1, 2.5], [True, False], [2.5], []])
def test_inferred_equals_pa_array(values):
    _same(inferred(values), pa.array(values))


def test_counts_batch_equals_from_pydict():
    assert counts_batch(applied=3, skipped=0).equals(
        pa.RecordBatch.from_pydict({"applied": [3], "skipped": [0]}))


_WORKER_PATHS = """
import json, sys
import numpy as np, pyarrow as pa
from sqe.lang.expressions import parse_expression
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.marks import TaskMarks
from sqe.source.kafka.rows import Records, to_rows
from sqe.wire.chunk.pack import encode_chunks
from sqe.wire.arrays import binaries, counts_batch, from_numpy, strings
from sqe.wire.keys import encode_keys
from state.kafka.produce import records as _records
from state.kafka.config import KafkaStateConfig
from state.postgres.encoding import csv_task
from state.redis.protocol import hset_commands
assert "pandas" not in sys.modules, "imported with the modules"

n = 300
pid, part, off = np.full(n, 7), np.arange(n) % 3, np.arange(n) + 10
keys = encode_keys(pid, part, off).to_pylist()
regions = strings([["eu", "us", None][i % 3] for i in range(n)])
values = [b"v%d" % i for i in range(n)]
post = json.dumps({"Or": [{"In": ["_filter_value", {"C": "eu"}, {"C": 3}]},
                          {">": ["_offset", {"C": 5}]}]})
plain = Records(keys=keys, values=values, offsets=list(range(n)), stamps=[1_700_000_000_000] * n,
                filter_values=[None if r is None else r.encode() for r in regions.to_pylist()])
cfg = SourceConfig.from_options({"topic": "t", "brokers": "127.0.0.1:1", "postFilter": post,
                                 "filterValues": '["eu"]', "matchUnfiltered": "true"})
batch, tally = to_rows(cfg, RangePartition("t", 0, 0, n), plain, TaskMarks.given({(7, 1): 40}), None)
assert 0 < batch.num_rows < n and tally.replays_dropped, (batch.num_rows, tally)
tally.row("t", 0)

chunks = encode_chunks(pid, part, off, regions, binaries(values), max_messages=40)
chunked = Records(keys=[c.key for c in chunks], values=[c.data for c in chunks],
                  offsets=list(range(len(chunks))), stamps=[1_700_000_000_000] * len(chunks))
ccfg = SourceConfig.from_options({"topic": "t", "brokers": "127.0.0.1:1", "chunks": "true",
                                  "filterValues": '["eu"]'})
batch, tally = to_rows(ccfg, RangePartition("t", 0, 0, n), chunked,
                       TaskMarks.given({(7, 1): 40}), None)
assert 0 < batch.num_rows < n and tally.chunks_read, (batch.num_rows, tally)

rows = pa.RecordBatch.from_arrays(
    [binaries(values), from_numpy(pid), from_numpy(part.astype(np.int32)), from_numpy(off),
     regions],
    names=["_v", "_sqe_pid", "_sqe_partition", "_sqe_offset", "_fv"])
for chunking in (False, True):
    state = KafkaStateConfig("out", "127.0.0.1:1", "streammetadata", ("v",), chunking=chunking)
    assert sum(len(k) for k, _, _ in _records(iter([rows]), state))
assert sum(c.rows for c in hset_commands(b"h", strings(["f"] * n), binaries(values))) == n
from partitioners.murmur2 import murmur2_array
assert len(murmur2_array(binaries(values[:5] + [None]))) == 6
assert list(csv_task(iter([pa.RecordBatch.from_arrays([binaries(values)], names=["v"])])))

from sqe.engine.batch.one_pass_task import merge_results, pass_task
from sqe.wire.columns import TALLY
kept = np.arange(n) % 2 == 0
cols = {"_sqe_bad": from_numpy(np.zeros(n, dtype=bool)),
        "_sqe_warn0": from_numpy(np.zeros(n, dtype=bool))}
for name, values in (("_offset", off), ("_pid", pid), ("_source_partition", part.astype(np.int32)),
                     ("_source_offset", off)):
    cols[f"_sqe_raw{name}"] = from_numpy(values)
for name in TALLY:
    cols[f"_sqe_raw{name}"] = from_numpy(np.zeros(n, dtype=np.int64), valid=np.zeros(n, bool))
cols["_sqe_state0"] = pa.StructArray.from_arrays([from_numpy(off)], names=["x"],
                                                 mask=from_numpy(~kept))
one_pass = pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))
def written(batches):
    yield counts_batch(written=sum(b.num_rows for b in batches))
result = merge_results(list(pass_task([(0, written)], 1)(iter([one_pass])))[0].to_pylist(), 1)
assert result.records == n and result.marks and result.states[0]["written"] == kept.sum()

from sqe.source.json_fields import read_fields, with_fields
ok, read = read_fields(binaries([b'{"a": "x", "b": 1}', b'[]', None, b'{"b": "2"}']),
                       [("a", "string"), ("b", "bigint")])
assert ok.to_pylist() == [True, False, False, False] and read[1].to_pylist()[0] == 1
assert with_fields(tally.row("t", 0), [("a", "string")]).num_columns
print("pandas" in sys.modules)
"""


def test_a_workers_paths_leave_pandas_unimported():
    """The source's rows (plain and chunked, with marks, filter values and a post-filter), a
    tally row, the states' task functions, a one-pass task (its counts, marks and result
    rows) and the source's reading of JSON fields, run in a new interpreter, import no
    pandas."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_WORKER_PATHS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"


@given(st.lists(st.one_of(st.none(), st.binary(max_size=9)), max_size=30), st.integers(0, 4),
       st.sampled_from([pa.binary(), pa.large_binary()]))
def test_value_offsets_and_present_read_what_pyarrow_holds(values, cut, type_):
    array = pa.array(values, type_).slice(min(cut, len(values)))
    offsets = value_offsets(array).tolist()
    data = bytes(array.buffers()[2] or b"")
    assert len(offsets) == len(array) + 1 and offsets == sorted(offsets)
    assert [data[a:b] for a, b in zip(offsets, offsets[1:], strict=False)] == [
        v or b"" for v in array.to_pylist()]
    assert present(array).tolist() == array.is_valid().to_pylist()


@given(st.lists(st.one_of(st.none(), st.binary(max_size=9)), max_size=30))
def test_packed_equals_pa_array(values):
    data = b"".join(v or b"" for v in values)
    ends = np.cumsum([len(v or b"") for v in values]).tolist()
    valid = np.array([v is not None for v in values], dtype=bool)
    _same(packed(data, ends, valid), pa.array(values, pa.binary()))
