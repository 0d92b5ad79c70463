"""StreamMetadata codec and PID: Java vectors, round-trips, vectorised == scalar."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqe.wire.keys import StreamMetadata, decode_keys, encode_keys, kafka_secondary_id, pid_for
from sqe.wire.murmur import murmur64a
from tests.support import ROOT
from tests.support import VECTORS as VECTOR_DIR

VECTORS = VECTOR_DIR / "stream_metadata.tsv"
SHARED_VECTORS = ROOT.parent / "shared" / "vectors" / "stream_metadata.tsv"

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
EDGE64 = st.sampled_from([-(2**63), 2**63 - 1, -1, 0, 1])


def _rows(kind: str) -> list[list[str]]:
    lines = VECTORS.read_text().splitlines()
    return [line.split("\t")[1:] for line in lines if line.startswith(kind + "\t")]


def test_vectors_file_matches_the_shared_reference():
    if not SHARED_VECTORS.exists():
        pytest.skip(f"no shared reference beside the repo ({SHARED_VECTORS})")
    assert VECTORS.read_text() == SHARED_VECTORS.read_text()


@pytest.mark.parametrize("hex_input,expected", _rows("pid"))
def test_murmur64a_matches_java_vectors(hex_input, expected):
    assert murmur64a(bytes.fromhex(hex_input)) == int(expected)


def test_vectors_file_is_not_empty():
    assert len(_rows("pid")) >= 4 and len(_rows("key")) >= 2


@pytest.mark.parametrize("pid,partition,offset,key_hex", _rows("key"))
def test_key_matches_java_vectors(pid, partition, offset, key_hex):
    m = StreamMetadata(int(pid), int(partition), int(offset))
    assert m.to_bytes().hex() == key_hex
    assert StreamMetadata.from_bytes(bytes.fromhex(key_hex)) == m
    arr = encode_keys([int(pid)], [int(partition)], [int(offset)])
    assert arr.to_pylist() == [bytes.fromhex(key_hex)]


def test_pid_hashes_the_concatenation_as_utf8():
    assert pid_for("top", "stream", "c1/events") == murmur64a(b"topstreamc1/events")
    assert pid_for("tö", "s", "x") == murmur64a("tösx".encode())
    assert pid_for("a", "b", "c") != pid_for("a", "c", "b")


def test_murmur64a_covers_every_tail_length():
    # Lengths 0..17 exercise each switch case of the Java tail and multi-word bodies.
    values = {murmur64a(bytes(range(n))) for n in range(18)}
    assert len(values) == 18
    assert all(-(2**63) <= v < 2**63 for v in values)


def test_secondary_id_prefers_the_cluster_id():
    assert kafka_secondary_id("abc", ["h2:9092", "h1:9092"], "events") == "abc/events"
    assert kafka_secondary_id(None, ["h2:9092", " h1:9092"], "events") == "h1:9092,h2:9092/events"
    assert kafka_secondary_id("", ["b", "a"], "t") == "a,b/t"


@given(INT64 | EDGE64, INT32, INT64 | EDGE64)
def test_scalar_round_trip(pid, partition, offset):
    m = StreamMetadata(pid, partition, offset)
    data = m.to_bytes()
    assert len(data) == 20
    assert StreamMetadata.from_bytes(data) == m


@pytest.mark.parametrize("length", [0, 1, 19, 21, 40])
def test_from_bytes_rejects_wrong_lengths(length):
    with pytest.raises(ValueError, match=f"exactly 20 bytes, got {length}"):
        StreamMetadata.from_bytes(bytes(length))


def test_from_bytes_rejects_null():
    with pytest.raises(ValueError, match="NULL"):
        StreamMetadata.from_bytes(None)


@pytest.mark.parametrize("args", [(2**63, 0, 0), (0, 2**31, 0), (0, 0, -(2**63) - 1)])
def test_out_of_range_fields_are_rejected(args):
    with pytest.raises(ValueError, match="does not fit"):
        StreamMetadata(*args)


def test_encode_keys_rejects_out_of_range_and_ragged_columns():
    with pytest.raises(ValueError, match="partition value 2147483648"):
        encode_keys([1], [2**31], [0])
    with pytest.raises(ValueError, match="equal lengths"):
        encode_keys([1, 2], [0], [0])
    with pytest.raises(TypeError, match="integers"):
        encode_keys([1.5], [0], [0])


# A key in a mixed column: a valid StreamMetadata, NULL, or raw bytes of any length.
KEY = st.one_of(
    st.tuples(INT64 | EDGE64, INT32, INT64 | EDGE64).map(lambda t: StreamMetadata(*t).to_bytes()),
    st.none(),
    st.binary(max_size=41),
)


def _scalar_decode(keys: list[bytes | None]):
    out = []
    for k in keys:
        if k is not None and len(k) == 20:
            m = StreamMetadata.from_bytes(k)
            out.append((m.pid, m.partition, m.offset, True))
        else:
            out.append((0, 0, 0, False))
    return out


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
@given(keys=st.lists(KEY, max_size=60), cut=st.integers(0, 5))
def test_vectorised_decode_equals_scalar(arrow_type, keys, cut):
    arr = pa.array(keys, type=arrow_type)
    sliced = arr.slice(min(cut, len(arr)))  # non-zero array offsets must work too
    pid, part, off, valid = decode_keys(sliced)
    assert pid.dtype == np.int64 and part.dtype == np.int32 and off.dtype == np.int64
    assert valid.dtype == np.bool_
    got = list(zip(pid.tolist(), part.tolist(), off.tolist(), valid.tolist(), strict=True))
    assert got == _scalar_decode(keys[min(cut, len(keys)):])


@given(st.lists(st.tuples(INT64 | EDGE64, INT32, INT64 | EDGE64), max_size=50))
def test_vectorised_encode_equals_scalar_and_round_trips(rows):
    pid = [r[0] for r in rows]
    part = [r[1] for r in rows]
    off = [r[2] for r in rows]
    arr = encode_keys(np.array(pid, dtype=np.int64), np.array(part, dtype=np.int32),
                      np.array(off, dtype=np.int64))
    assert isinstance(arr, pa.BinaryArray)
    assert arr.to_pylist() == [StreamMetadata(*r).to_bytes() for r in rows]
    dp, dq, do, valid = decode_keys(arr)
    assert valid.all() and dp.tolist() == pid and dq.tolist() == part and do.tolist() == off


def test_decode_fixed_size_chunked_and_null_columns():
    key = StreamMetadata(-7, 3, 99).to_bytes()
    fixed = pa.array([key, None, key], type=pa.binary(20))
    pid, part, off, valid = decode_keys(fixed)
    assert valid.tolist() == [True, False, True] and pid.tolist() == [-7, 0, -7]
    wrong_width = pa.array([bytes(19)], type=pa.binary(19))
    assert decode_keys(wrong_width)[3].tolist() == [False]
    chunked = pa.chunked_array([[key], [None, b"short"]], type=pa.binary())
    assert decode_keys(chunked)[3].tolist() == [True, False, False]
    assert decode_keys(pa.nulls(3))[3].tolist() == [False, False, False]
    with pytest.raises(TypeError, match="binary"):
        decode_keys(pa.array([1, 2]))
