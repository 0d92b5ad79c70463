"""The chunk codec: many messages of one source partition in one Kafka record.

Layout (big-endian)::

    [0, 4)    magic "SQEC"
    [4]       version u8 (2; readers also take 1)
    [5]       flags u8: bits 0-2 the body codec (0 none, 1 zstd, 2 lz4), bit 3 has-filter
    [6]       bloom size u8 (0, or 16..255 with has-filter)
    [7]       reserved u8 (0)
    [8, 12)   message count u32
    [12, 20)  base offset i64
    [20, 24)  CRC32C (Castagnoli) of bytes [0, 20), then bytes [24, end), then (version 2)
              the record's Kafka key (the 20-byte StreamMetadata; nothing when it has none)
    [24, 24 + bloom size)  the Bloom filter (:mod:`sqe.wire.chunk.bloom`)
    body:     per message: relative offset u32 | filter value: u16 length (0xFFFF = none)
              + UTF-8 | value: i32 length (-1 = NULL) + bytes
              compressed (codec != 0): u32 length of the plain body, then the codec's frame

The CRC covers the header fields before it too (count, base offset, flags,
the filter's size) and the Bloom filter: a flipped bit there would otherwise
shift every offset, mis-read the body, or make a reader skip a chunk it wants.
Absolute offset = base offset + relative offset.  A chunk's Kafka key is the
StreamMetadata of its **last** message; version 2 covers it by the CRC too, so
a reader may trust the key of a chunk whose CRC matches to skip it whole as a
replay (a version 1 chunk's key is only checked once the chunk is decoded).
Readers check the CRC before any skip decision.

:func:`read_header` parses and checks the header without touching the body;
:func:`decode_chunk` checks the CRC and every length before it trusts one, so
random or mutated bytes raise a :class:`ChunkError` subclass naming the
problem, never hang, never allocate more than :data:`MAX_BODY_BYTES`, and
never return wrong data.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import crc32c
import pyarrow as pa

from sqe.errors import (
    BadCount,
    BadLength,
    BadMagic,
    ChunkError,
    CrcMismatch,
    KeyMismatch,
    TruncatedChunk,
    UnknownVersion,
    WireError,
)
from sqe.wire.chunk.bloom import MAX_SIZE, MIN_SIZE, BloomFilter

__all__ = [
    "MAGIC", "VERSION", "HEADER_BYTES", "MAX_BODY_BYTES", "Codec", "ChunkHeader", "Message",
    "ChunkError", "TruncatedChunk", "BadMagic", "UnknownVersion", "CrcMismatch", "BadCount",
    "BadLength", "KeyMismatch", "VERSIONS", "crc_problem", "encode_chunk", "frame_chunk",
    "decode_chunk", "checked_body", "read_header",
]

MAGIC = b"SQEC"
VERSION = 2
#: The versions a reader decodes (version 1: the CRC does not cover the key).
VERSIONS = (1, 2)
HEADER_BYTES = 24
#: The largest plain body a chunk may declare (a bound on what a decoder allocates).
MAX_BODY_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">4sBBBBIqI")
_NO_FILTER_VALUE = 0xFFFF
_MIN_MESSAGE_BYTES = 4 + 2 + 4
_MAX_OFFSET = 2**63 - 1

Codec = Literal["none", "zstd", "lz4"]
_CODECS: tuple[Codec, ...] = ("none", "zstd", "lz4")
_HAS_FILTER = 0x08










@dataclass(frozen=True)
class Message:
    """One message of a chunk: its absolute offset, filter value (None: unfiltered), value."""

    offset: int
    filter_value: str | None
    value: bytes | None


@dataclass(frozen=True)
class ChunkHeader:
    """What the header says; ``body_start`` is where the (maybe compressed) body begins."""

    version: int
    codec: Codec
    count: int
    base_offset: int
    bloom: bytes
    body_start: int
    crc: int


def _crc(data: bytes | memoryview, key: bytes | None = None) -> int:
    """The CRC of a chunk whose record has ``key``; it covers the key from version 2 on."""
    view = memoryview(data)
    crc = crc32c.crc32c(view[HEADER_BYTES:], crc32c.crc32c(view[:20]))
    return crc32c.crc32c(key or b"", crc) if view[4] >= 2 else crc


def crc_problem(data: bytes | memoryview, stored: int, key: bytes | None) -> CrcMismatch | None:
    """The :class:`CrcMismatch` of a chunk (its header read) whose CRC is not ``stored``."""
    actual = _crc(data, key)
    if actual == stored:
        return None
    covered = " and its record key" if memoryview(data)[4] >= 2 else ""
    return CrcMismatch(f"CRC32C 0x{actual:08x} of the chunk{covered} does not match the "
                       f"header's 0x{stored:08x}")


def encode_chunk(messages: Sequence[Message], base_offset: int, filter_size: int = 16,
                 codec: Codec = "none", key: bytes | None = None, version: int = VERSION
                 ) -> bytes:
    """The chunk holding ``messages`` (offsets >= ``base_offset``), with a filter of
    ``filter_size`` bytes (0: none), the body compressed by ``codec``, for a record keyed
    ``key`` (``version`` 1 writes what older writers did, for tests of readers)."""
    if codec not in _CODECS:
        raise WireError(f"chunk codec must be one of {', '.join(_CODECS)}, got {codec!r}")
    if not messages:
        raise WireError("a chunk holds at least one message")
    bloom = BloomFilter(filter_size) if filter_size else None
    parts = []
    for m in messages:
        rel = m.offset - base_offset
        if not 0 <= rel <= 0xFFFF_FFFF:
            raise WireError(f"offset {m.offset} is not within 2**32 after base {base_offset}")
        if m.filter_value is None:
            fv, fv_len = b"", _NO_FILTER_VALUE
        else:
            fv = m.filter_value.encode("utf-8")
            fv_len = len(fv)
            if fv_len >= _NO_FILTER_VALUE:
                raise WireError(f"filter value of offset {m.offset} is {fv_len} bytes; "
                                 f"at most {_NO_FILTER_VALUE - 1}")
        if bloom is not None:
            bloom.add(m.filter_value)
        v_len = -1 if m.value is None else len(m.value)
        parts += [struct.pack(">IH", rel, fv_len), fv, struct.pack(">i", v_len), m.value or b""]
    return frame_chunk(b"".join(parts), len(messages), base_offset,
                       bloom.to_bytes() if bloom is not None else b"", codec, key, version)


def frame_chunk(body: bytes, count: int, base_offset: int, bloom: bytes, codec: Codec,
                key: bytes | None = None, version: int = VERSION) -> bytes:
    """A chunk around an encoded (plain) message ``body``: the body compressed by ``codec``,
    the header with ``bloom`` (empty: no filter) and the CRC over it and the record's
    ``key``.  Both encoders end here."""
    if version not in VERSIONS:
        raise WireError(f"chunk version must be one of {VERSIONS}, got {version}")
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"chunk body is {len(body)} bytes; at most {MAX_BODY_BYTES}")
    if codec != "none":
        body = struct.pack(">I", len(body)) + pa.Codec(codec).compress(body, asbytes=True)
    flags = _CODECS.index(codec) | (_HAS_FILTER if bloom else 0)
    head = _HEADER.pack(MAGIC, version, flags, len(bloom), 0, count, base_offset, 0)
    chunk = bytearray(head + bloom + body)
    struct.pack_into(">I", chunk, 20, _crc(bytes(chunk), key))
    return bytes(chunk)


def read_header(data: bytes | memoryview) -> ChunkHeader:
    """The header of ``data``, checked, without reading (or checksumming) the body."""
    if len(data) < HEADER_BYTES:
        raise TruncatedChunk(f"{len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, flags, bloom_size, reserved, count, base, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadMagic(f"starts with {bytes(magic)!r}, not the chunk magic {MAGIC!r}")
    if version not in VERSIONS:
        raise UnknownVersion(f"chunk version {version}; this reader knows versions "
                             f"{', '.join(map(str, VERSIONS))}")
    codec_id, has_filter = flags & 0x07, bool(flags & _HAS_FILTER)
    if codec_id >= len(_CODECS) or flags & ~0x0F or reserved:
        raise UnknownVersion(f"flags 0x{flags:02x} / reserved {reserved}: unknown codec or flag")
    if has_filter != bool(bloom_size) or (bloom_size and not MIN_SIZE <= bloom_size <= MAX_SIZE):
        raise BadLength(f"bloom size {bloom_size} with has-filter {has_filter}; a filter is "
                        f"{MIN_SIZE}..{MAX_SIZE} bytes")
    body_start = HEADER_BYTES + bloom_size
    if len(data) < body_start:
        raise TruncatedChunk(f"{len(data)} bytes, shorter than the header and its "
                             f"{bloom_size}-byte filter")
    if count == 0:
        raise BadCount("message count 0; a chunk holds at least one message")
    return ChunkHeader(version, _CODECS[codec_id], count, base,
                       bytes(data[HEADER_BYTES:body_start]), body_start, crc)


def _plain_body(data: bytes | memoryview, header: ChunkHeader) -> memoryview:
    body = memoryview(data)[header.body_start:]
    if header.codec == "none":
        return body
    if len(body) < 4:
        raise TruncatedChunk("a compressed body without its 4-byte plain length")
    (plain,) = struct.unpack_from(">I", body)
    if plain > MAX_BODY_BYTES or plain < header.count * _MIN_MESSAGE_BYTES:
        raise BadLength(f"plain body length {plain} for {header.count} message(s) (at least "
                        f"{_MIN_MESSAGE_BYTES} bytes each, at most {MAX_BODY_BYTES} in all)")
    try:
        out = pa.Codec(header.codec).decompress(body[4:], decompressed_size=plain, asbytes=True)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise BadLength(f"{header.codec} body does not decompress: {exc}") from None
    if len(out) != plain:
        raise BadLength(f"{header.codec} body decompressed to {len(out)} bytes, not {plain}")
    return memoryview(out)


def checked_body(data: bytes | memoryview, key: bytes | None = None, *,
                 crc_checked: bool = False) -> tuple[ChunkHeader, memoryview]:
    """The header and the plain (decompressed) body of a chunk (of a record keyed ``key``)
    whose CRC matches (``crc_checked``: the caller checked it) and whose message count can fit
    its body; anything else raises its :class:`ChunkError`."""
    header = read_header(data)
    problem = None if crc_checked else crc_problem(data, header.crc, key)
    if problem is not None:
        raise problem
    body = _plain_body(data, header)
    if header.count * _MIN_MESSAGE_BYTES > len(body):
        raise BadCount(f"{header.count} messages cannot fit in a {len(body)}-byte body")
    return header, body


def decode_chunk(data: bytes | memoryview, key: bytes | None = None) -> list[Message]:
    """Every message of the chunk in ``data``, the value of a record keyed ``key`` (the
    scalar reference decoder)."""
    header, body = checked_body(data, key)
    out = []
    pos, end = 0, len(body)
    for i in range(header.count):
        if pos + 6 > end:
            raise TruncatedChunk(f"message {i + 1} of {header.count} starts past the body end")
        rel, fv_len = struct.unpack_from(">IH", body, pos)
        pos += 6
        fv = None
        if fv_len != _NO_FILTER_VALUE:
            if pos + fv_len > end:
                raise BadLength(f"message {i + 1}: filter value of {fv_len} bytes runs past "
                                "the body end")
            try:
                fv = bytes(body[pos:pos + fv_len]).decode("utf-8")
            except UnicodeDecodeError:
                raise BadLength(f"message {i + 1}: filter value is not UTF-8") from None
            pos += fv_len
        if pos + 4 > end:
            raise TruncatedChunk(f"message {i + 1}: value length runs past the body end")
        (v_len,) = struct.unpack_from(">i", body, pos)
        pos += 4
        value = None
        if v_len != -1:
            if v_len < 0 or pos + v_len > end:
                raise BadLength(f"message {i + 1}: value length {v_len} does not fit the body")
            value = bytes(body[pos:pos + v_len])
            pos += v_len
        offset = header.base_offset + rel
        if offset > _MAX_OFFSET:
            raise BadLength(f"message {i + 1}: offset {offset} is past the int64 range")
        out.append(Message(offset, fv, value))
    if pos != end:
        raise BadLength(f"{end - pos} byte(s) after the last of {header.count} messages")
    return out
