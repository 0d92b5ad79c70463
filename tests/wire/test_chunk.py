"""The chunk codec: byte layout, round trips across codecs and filter sizes, and a fuzz test
(random and mutated bytes never hang, never allocate absurdly, never decode to wrong data)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqe.wire.chunk.bloom import BloomFilter
from sqe.wire.chunk.codec import (
    HEADER_BYTES,
    MAX_BODY_BYTES,
    BadCount,
    BadLength,
    BadMagic,
    ChunkError,
    CrcMismatch,
    Message,
    TruncatedChunk,
    UnknownVersion,
    _crc,
    decode_chunk,
    encode_chunk,
    read_header,
)
from sqe.wire.keys import StreamMetadata

CODECS = ["none", "zstd", "lz4"]


def _fix_crc(chunk: bytearray) -> bytes:
    struct.pack_into(">I", chunk, 20, _crc(chunk))
    return bytes(chunk)


def test_byte_layout_of_a_small_chunk():
    msgs = [Message(100, "eu", b"a"), Message(102, None, None)]
    key = StreamMetadata(9, 1, 102).to_bytes()
    chunk = encode_chunk(msgs, base_offset=100, filter_size=16, key=key)
    assert chunk[:4] == b"SQEC" and chunk[4] == 2
    assert chunk[5] == 0x08 and chunk[6] == 16 and chunk[7] == 0   # no codec, has filter
    assert struct.unpack(">Iq", chunk[8:20]) == (2, 100)
    bloom = BloomFilter(16)
    bloom.add("eu")
    bloom.add(None)
    assert chunk[24:40] == bloom.to_bytes()
    assert chunk[40:] == (struct.pack(">IH", 0, 2) + b"eu" + struct.pack(">i", 1) + b"a"
                          + struct.pack(">IH", 2, 0xFFFF) + struct.pack(">i", -1))
    (crc,) = struct.unpack(">I", chunk[20:24])  # header, filter, body and the record key
    assert crc == crc32c.crc32c(key, crc32c.crc32c(chunk[24:], crc32c.crc32c(chunk[:20])))
    assert decode_chunk(chunk, key) == msgs
    with pytest.raises(CrcMismatch, match="and its record key"):
        decode_chunk(chunk, StreamMetadata(9, 1, 103).to_bytes())
    header = read_header(chunk[:40])  # the header alone is enough: the body is not touched
    assert (header.count, header.base_offset, header.codec, header.bloom) == (
        2, 100, "none", bloom.to_bytes())


def test_version_1_chunks_written_before_the_key_was_covered_still_decode():
    msgs = [Message(7, "eu", b"a"), Message(9, None, b"b")]
    old = encode_chunk(msgs, 7, 16, version=1)
    assert old[4] == 1
    (crc,) = struct.unpack(">I", old[20:24])
    assert crc == crc32c.crc32c(old[24:], crc32c.crc32c(old[:20]))  # no key in version 1
    assert decode_chunk(old, StreamMetadata(1, 0, 9).to_bytes()) == decode_chunk(old) == msgs
    assert read_header(old).version == 1


messages = st.lists(
    st.tuples(st.integers(0, 5000), st.one_of(st.none(), st.text(max_size=20)),
              st.one_of(st.none(), st.binary(max_size=300))),
    min_size=1, max_size=60)


@given(messages, st.integers(-(2**62), 2**62), st.sampled_from([0, 16, 17, 255]),
       st.sampled_from(CODECS))
def test_round_trip(raw, base, filter_size, codec):
    offsets = sorted({o for o, _, _ in raw})
    msgs = [Message(base + o, fv, v) for o, (_, fv, v) in zip(offsets, raw, strict=False)]
    chunk = encode_chunk(msgs, base, filter_size, codec)
    assert decode_chunk(chunk) == msgs
    header = read_header(chunk)
    assert header.codec == codec and header.count == len(msgs) and header.base_offset == base
    if filter_size:
        f = BloomFilter.from_bytes(header.bloom)
        assert all(f.might_contain([m.filter_value]) for m in msgs if m.filter_value is not None)
    assert decode_chunk(memoryview(chunk)) == msgs


def _valid(codec: str = "none") -> bytes:
    msgs = [Message(10 + i, ["eu", "us", None][i % 3], b"v%d" % i * (i % 5)) for i in range(40)]
    return encode_chunk(msgs, 10, 16, codec)


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_any_mutation_or_truncation_is_an_error_never_wrong_data(codec, data):
    chunk = bytearray(_valid(codec))
    original = decode_chunk(bytes(chunk))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(chunk) - 1))
        chunk[i] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        chunk = chunk[:data.draw(st.integers(0, len(chunk) - 1))]
    elif how == "extend":
        chunk += data.draw(st.binary(min_size=1, max_size=50))
    else:
        i = data.draw(st.integers(0, len(chunk) - 1))
        chunk[i:i + 8] = data.draw(st.binary(min_size=8, max_size=8))
    try:
        got = decode_chunk(bytes(chunk))
    except ChunkError:
        return
    assert got == original and bytes(chunk) == _valid(codec)  # only an identity "mutation"


@given(st.binary(max_size=2000))
def test_random_bytes_are_an_error(data):
    with pytest.raises(ChunkError):
        decode_chunk(data)
    with pytest.raises(ChunkError):
        decode_chunk(b"SQEC\x01" + data)


def test_each_problem_has_its_own_error():
    good = _valid()
    with pytest.raises(TruncatedChunk, match="shorter than the 24-byte header"):
        decode_chunk(good[:10])
    with pytest.raises(BadMagic, match="not the chunk magic"):
        decode_chunk(b"KAFK" + good[4:])
    with pytest.raises(UnknownVersion, match="chunk version 3; this reader knows versions 1, 2"):
        decode_chunk(good[:4] + b"\x03" + good[5:])
    with pytest.raises(CrcMismatch, match="does not match"):
        decode_chunk(good[:-1] + bytes([good[-1] ^ 1]))
    # Lies that carry a valid CRC: caught by the length checks.
    lie = bytearray(good)
    struct.pack_into(">I", lie, 8, 2**32 - 1)
    with pytest.raises(BadCount, match="cannot fit"):
        decode_chunk(_fix_crc(lie))
    lie = bytearray(good)
    struct.pack_into(">I", lie, 8, 39)
    with pytest.raises(BadLength, match="after the last of 39 messages"):
        decode_chunk(_fix_crc(lie))
    lie = bytearray(good)
    struct.pack_into(">i", lie, HEADER_BYTES + 16 + 6 + 2, 2**31 - 1)  # first value length
    with pytest.raises(BadLength, match="does not fit the body"):
        decode_chunk(_fix_crc(lie))


def test_a_compressed_body_may_not_claim_an_absurd_size():
    lie = bytearray(_valid("zstd"))
    struct.pack_into(">I", lie, HEADER_BYTES + 16, MAX_BODY_BYTES + 1)
    with pytest.raises(BadLength, match="plain body length"):
        decode_chunk(_fix_crc(lie))
    lie = bytearray(_valid("lz4"))
    struct.pack_into(">I", lie, HEADER_BYTES + 16, MAX_BODY_BYTES)  # allowed, but false
    with pytest.raises(BadLength):
        decode_chunk(_fix_crc(lie))


def test_encoder_refuses_what_it_cannot_write():
    with pytest.raises(ValueError, match="at least one message"):
        encode_chunk([], 0)
    with pytest.raises(ValueError, match="not within 2\\*\\*32"):
        encode_chunk([Message(2**32 + 5, None, b"")], 0)
    with pytest.raises(ValueError, match="chunk codec must be one of none, zstd, lz4"):
        encode_chunk([Message(0, None, b"")], 0, codec="gzip")
    with pytest.raises(ValueError, match="16..255"):
        encode_chunk([Message(0, None, b"")], 0, filter_size=8)


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_lies_with_a_valid_crc_raise_chunk_errors_only(codec, data):
    """A writer bug (not corruption) passes the CRC: every field is still bounds-checked."""
    chunk = bytearray(_valid(codec))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(4, len(chunk) - 1))
        if 20 <= i < 24:
            continue
        chunk[i] = data.draw(st.integers(0, 255))
    try:
        got = decode_chunk(_fix_crc(chunk))
    except ChunkError:
        return
    header = read_header(bytes(chunk))
    assert len(got) == header.count
    assert all(header.base_offset <= m.offset for m in got)
