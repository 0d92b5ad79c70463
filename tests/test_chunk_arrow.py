"""decode_chunks (vectorised, many chunks at once) against decode_chunk (the scalar reference)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from sqe.chunk import ChunkError, Message, _crc, decode_chunk, encode_chunk
from sqe.chunk_arrow import decode_chunks

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
