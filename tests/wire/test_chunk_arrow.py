"""decode_chunks (vectorised, many chunks at once) against decode_chunk (the scalar reference)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from sqe.wire.chunk.arrow import decode_chunks
from sqe.wire.chunk.codec import ChunkError, Message, _crc, decode_chunk, encode_chunk
from sqe.wire.keys import StreamMetadata

message_lists = st.lists(
    st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=12)),
                       st.one_of(st.none(), st.binary(max_size=64))), min_size=1, max_size=30),
    max_size=12)


def _chunks(lists, codec_pick):
    out = []
    for n, msgs in enumerate(lists):
        base = n * 1000 - 5
        encoded = [Message(base + 3 * i, fv, v) for i, (fv, v) in enumerate(msgs)]
        out.append(encode_chunk(encoded, base, [0, 16, 40][n % 3], codec_pick(n)))
    return out


def _reference(chunks):
    rows, bad = [], {}
    for i, c in enumerate(chunks):
        try:
            rows += [(i, m.offset, m.filter_value, m.value) for m in decode_chunk(c)]
        except ChunkError as exc:
            bad[i] = (type(exc), str(exc))
    return rows, bad


def _vectorised(chunks):
    d = decode_chunks(chunks)
    rows = list(zip(d.chunk.tolist(), d.offset.tolist(), d.filter_value.to_pylist(),
                    d.value.to_pylist(), strict=True))
    return rows, {i: (type(e), str(e)) for i, e in d.bad.items()}


@given(message_lists, st.sampled_from(["none", "zstd", "lz4"]))
def test_equal_to_the_reference_on_good_chunks(lists, codec):
    chunks = _chunks(lists, lambda n: codec if n % 2 else "none")
    assert _vectorised(chunks) == _reference(chunks)
    assert _reference(chunks)[1] == {}


@given(message_lists, st.data())
def test_equal_to_the_reference_with_bad_chunks_among_good_ones(lists, data):
    chunks = [bytearray(c) for c in _chunks(lists, lambda n: "none")]
    for c in chunks:
        if data.draw(st.booleans()):
            for _ in range(data.draw(st.integers(1, 3))):
                i = data.draw(st.integers(24, len(c) - 1))
                c[i] = data.draw(st.integers(0, 255))
            if data.draw(st.booleans()):  # a lie with a valid CRC: the walk must catch it
                struct.pack_into(">I", c, 20, _crc(c))
    chunks = [bytes(c) for c in chunks] + [b"junk", b""]
    assert _vectorised(chunks) == _reference(chunks)


def test_no_chunks():
    d = decode_chunks([])
    assert len(d) == 0 and d.bad == {}


rows = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3),
                          st.one_of(st.none(), st.sampled_from(["eu", "us", "δ", ""])),
                          st.one_of(st.none(), st.binary(max_size=40))), max_size=80)


@given(rows, st.integers(1, 7), st.sampled_from([16, 64, 10_000]), st.sampled_from([0, 16, 33]),
       st.sampled_from(["none", "zstd", "lz4"]))
def test_encode_chunks_equals_encode_chunk_and_round_trips(raw, max_messages, max_bytes,
                                                           filter_size, codec):
    import numpy as np
    import pyarrow as pa

    from sqe.wire.chunk.pack import encode_chunks

    partition = np.array([p for p, _, _, _ in raw], dtype=np.int64)
    offset = np.cumsum([step for _, step, _, _ in raw]).astype(np.int64) + 7
    fvs = pa.array([f for _, _, f, _ in raw], pa.string())
    values = pa.array([v for _, _, _, v in raw], pa.binary())
    pid = np.full(len(raw), -3, dtype=np.int64)
    chunks = encode_chunks(pid, partition, offset, fvs, values, max_messages, max_bytes,
                           filter_size, codec)
    covered = 0
    for c in chunks:
        assert c.start == covered and c.stop > c.start
        covered = c.stop
        msgs = [Message(int(offset[i]), raw[i][2], raw[i][3]) for i in range(c.start, c.stop)]
        key = StreamMetadata(-3, int(partition[c.start]), int(offset[c.stop - 1])).to_bytes()
        assert c.key == key
        assert c.data == encode_chunk(msgs, int(offset[c.start]), filter_size, codec, key)
        assert decode_chunk(c.data, key) == msgs
        assert len(set(partition[c.start:c.stop].tolist())) == 1
        assert c.stop - c.start <= max_messages
        body = sum(10 + len((m.filter_value or "").encode()) + len(m.value or b"") for m in msgs)
        assert body <= max_bytes or len(msgs) == 1
    assert covered == len(raw)
    again = encode_chunks(pid, partition, offset, fvs, values, max_messages, max_bytes,
                          filter_size, codec)
    assert [c.data for c in again] == [c.data for c in chunks]  # deterministic
