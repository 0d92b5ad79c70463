"""Decoding many chunks at once into Arrow columns (the vectorised twin of ``decode_chunk``).

The source's ``read()`` decodes every chunk of a fetch that survived the
Bloom probe and the HWM check with :func:`decode_chunks`.  Per chunk, only
the header, CRC and decompression run in Python; the message walk is NumPy
over all chunks at once: round ``r`` reads message ``r`` of every chunk that
has one (a chunk's messages are variable-length, so positions are found one
message at a time, but across chunks in parallel), then the filter values
and values are gathered into Arrow arrays in one step each.

A chunk that fails (bad header, CRC, a length out of bounds) is left out and
reported in :attr:`DecodedChunks.bad` with its :class:`~sqe.wire.chunk.codec.ChunkError`,
so the caller applies its corrupt-chunk policy to exactly that record.
:func:`sqe.wire.chunk.codec.decode_chunk` is the scalar reference; a test holds the two equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sqe.wire.arrays import booleans
from sqe.wire.chunk.codec import (
    _CODECS,
    _HAS_FILTER,
    _MAX_OFFSET,
    _NO_FILTER_VALUE,
    HEADER_BYTES,
    MAGIC,
    VERSIONS,
    BadLength,
    ChunkError,
    TruncatedChunk,
    checked_body,
    crc_problem,
    decode_chunk,
    read_header,
)

__all__ = ["ChunkHeaders", "DecodedChunks", "decode_chunks", "read_headers"]


@dataclass
class DecodedChunks:
    """Messages of the good chunks, chunk by chunk in input order, as columns."""

    chunk: np.ndarray                 # int64: index of the input chunk of each message
    offset: np.ndarray                # int64: absolute offset
    filter_value: pa.StringArray      # NULL: unfiltered
    value: pa.BinaryArray             # NULL: a NULL value
    bad: dict[int, ChunkError] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.offset)


@dataclass
class ChunkHeaders:
    """The headers of many chunks, checked (their CRC too), by input position."""

    count: np.ndarray                 # int64: messages in the chunk (0 where bad)
    base_offset: np.ndarray           # int64
    version: np.ndarray               # int64: the chunk version (0 where bad)
    blooms: list[bytes]               # the filter bytes, b"" without a filter (or where bad)
    bad: dict[int, ChunkError] = field(default_factory=dict)


def read_headers(chunks: Sequence[bytes], keys: Sequence[bytes | None] | None = None
                 ) -> ChunkHeaders:
    """:func:`sqe.wire.chunk.codec.read_header` of every record at once, and the CRC of each (over
    its record's key from version 2), so the Bloom and HWM stages never act on a corrupt
    header, filter or key.  The fixed 24 bytes are checked with NumPy; a record that fails
    is read again by the scalar reader, so the error is exactly the one it gives."""
    n = len(chunks)
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    head = np.frombuffer(b"".join(bytes(c[:HEADER_BYTES]).ljust(HEADER_BYTES, b"\0")
                                  for c in chunks), dtype=np.uint8).reshape(n, HEADER_BYTES)
    flags, bloom_size = head[:, 5].astype(np.int64), head[:, 6].astype(np.int64)
    count = head[:, 8:12].copy().view(">u4").ravel().astype(np.int64)
    base = head[:, 12:20].copy().view(">i8").ravel().astype(np.int64)
    has_filter = (flags & _HAS_FILTER) != 0
    ok = ((lengths >= HEADER_BYTES)
          & (head[:, :4] == np.frombuffer(MAGIC, dtype=np.uint8)).all(axis=1)
          & np.isin(head[:, 4], VERSIONS) & ((flags & 0x07) < len(_CODECS))
          & ((flags & ~0x0F) == 0)
          & (head[:, 7] == 0) & (has_filter == (bloom_size > 0))
          & ((bloom_size == 0) | (bloom_size >= 16))
          & (lengths >= HEADER_BYTES + bloom_size) & (count > 0))
    bad: dict[int, ChunkError] = {}
    for i in np.flatnonzero(~ok).tolist():
        try:
            read_header(chunks[i])
        except ChunkError as exc:
            bad[i] = exc
        else:  # the two readers disagree: trust neither
            raise AssertionError(f"read_headers rejected chunk {i} that read_header accepts")
    stored = head[:, 20:24].copy().view(">u4").ravel()
    for i in np.flatnonzero(ok).tolist():  # one C call per chunk, none per message
        problem = crc_problem(chunks[i], int(stored[i]), keys[i] if keys is not None else None)
        if problem is not None:
            bad[i] = problem
            ok[i] = False
    stop = HEADER_BYTES + bloom_size
    blooms = [bytes(c[HEADER_BYTES:s]) if good and s > HEADER_BYTES else b""
              for c, s, good in zip(chunks, stop.tolist(), ok.tolist(), strict=True)]
    return ChunkHeaders(np.where(ok, count, 0), np.where(ok, base, 0),
                        np.where(ok, head[:, 4].astype(np.int64), 0), blooms, bad)


def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned ints of ``width`` bytes at ``pos`` (clamped into ``buf``: a
    position past a chunk's end reads garbage that the caller's bounds check rejects)."""
    out = np.zeros(len(pos), dtype=np.uint64)
    last = len(buf) - 1
    for k in range(width):
        out = (out << np.uint64(8)) | buf[np.minimum(pos + k, last)].astype(np.uint64)
    return out


def _ranges(buf: np.ndarray, data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray,
            valid: np.ndarray, view_type: pa.DataType, plain_type: pa.DataType) -> pa.Array:
    """The byte ranges ``[start, start + length)`` of ``buf`` as an Arrow array.

    Built as a binary/string *view* array over ``data`` (16-byte views made with
    NumPy: length, then the bytes inline up to 12, else a 4-byte prefix, buffer
    0 and the offset), then cast to the plain type, which Arrow does with one
    memcpy per value: no per-byte or per-row Python work.
    """
    n = len(starts)
    views = np.zeros((n, 16), dtype=np.uint8)
    words = views.view(np.int32).reshape(n, 4)
    words[:, 0] = lengths
    cols = np.arange(12)
    head = buf[np.minimum(starts[:, None] + cols[None, :], len(buf) - 1)]
    head = np.where(cols[None, :] < lengths[:, None], head, 0).astype(np.uint8)
    inline = lengths <= 12
    views[inline, 4:16] = head[inline]
    views[~inline, 4:8] = head[~inline, :4]
    words[~inline, 3] = starts[~inline]
    bitmap = booleans(valid).buffers()[1] if n else None
    arr = pa.Array.from_buffers(view_type, n, [bitmap, pa.py_buffer(views.tobytes()), data],
                                null_count=int((~valid).sum()))
    return arr.cast(plain_type)


def _walk(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray,
          bases: np.ndarray) -> tuple[dict[str, np.ndarray], dict[int, tuple[type, str]]]:
    """Message positions of every chunk; problems by chunk position in ``starts``."""
    n_msgs = int(counts.sum())
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    cols = {k: np.zeros(n_msgs, dtype=np.int64) for k in ("rel", "fv_start", "fv_len",
                                                        "v_start", "v_len")}
    problems: dict[int, tuple[type[ChunkError], str]] = {}
    pos = starts.copy()
    active = np.arange(len(counts))
    for r in range(int(counts.max()) if len(counts) else 0):
        active = active[counts[active] > r]
        active = active[[int(a) not in problems for a in active]] if problems else active
        if not len(active):
            break
        p = pos[active]
        end = ends[active]
        rel = _be(buf, p, 4).astype(np.int64)
        fv_raw = _be(buf, p + 4, 2).astype(np.int64)
        fv_len = np.where(fv_raw == _NO_FILTER_VALUE, -1, fv_raw)
        fv_start = p + 6
        v_len_at = fv_start + np.maximum(fv_len, 0)
        v_len = _be(buf, v_len_at, 4).astype(np.int64)
        v_len = np.where(v_len >= 2**31, v_len - 2**32, v_len)  # i32
        v_start = v_len_at + 4
        nxt = v_start + np.maximum(v_len, 0)
        # the scalar decoder's checks, in its order, with its error classes
        checks = [
            (p + 6 > end, TruncatedChunk, "starts past the body end"),
            (v_len_at > end, BadLength, "filter value runs past the body end"),
            (v_start > end, TruncatedChunk, "value length runs past the body end"),
            ((v_len < -1) | (nxt > end), BadLength, "value length does not fit the body"),
            (bases[active] > _MAX_OFFSET - rel, BadLength, "offset is past the int64 range"),
        ]
        broken = np.zeros(len(active), dtype=bool)
        for failed, kind, text in checks:
            for a in active[failed & ~broken]:
                problems[int(a)] = (kind, f"message {r + 1}: {text}")
            broken |= failed
        ok = ~broken
        slot = first[active[ok]] + r
        for name, col in (("rel", rel), ("fv_start", fv_start), ("fv_len", fv_len),
                          ("v_start", v_start), ("v_len", v_len)):
            cols[name][slot] = col[ok]
        pos[active[ok]] = nxt[ok]
    leftover = (pos != ends)
    for a in np.flatnonzero(leftover):
        if int(a) not in problems:
            problems[int(a)] = (BadLength, f"{int(ends[a] - pos[a])} byte(s) after the last "
                                           f"of {int(counts[a])} messages")
    return cols, problems


def decode_chunks(chunks: Sequence[bytes | memoryview],
                  keys: Sequence[bytes | None] | None = None, *,
                  crc_checked: bool = False) -> DecodedChunks:
    """Decode ``chunks`` (Kafka record values, of records keyed ``keys``) into columns;
    failures go to ``bad``.  ``crc_checked``: :func:`read_headers` checked their CRCs."""
    bad: dict[int, ChunkError] = {}
    bodies: list[memoryview] = []
    index: list[int] = []
    counts: list[int] = []
    bases: list[int] = []
    for i, data in enumerate(chunks):
        try:
            header, body = checked_body(data, keys[i] if keys is not None else None,
                                        crc_checked=crc_checked)
        except ChunkError as exc:
            bad[i] = exc
            continue
        bodies.append(body)
        index.append(i)
        counts.append(header.count)
        bases.append(header.base_offset)
    while True:
        lengths = np.array([len(b) for b in bodies], dtype=np.int64)
        starts = np.zeros(len(bodies), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        buf = np.frombuffer(b"".join([*bodies, b"\0" * 8]), dtype=np.uint8)  # one copy
        cnt = np.array(counts, dtype=np.int64)
        base = np.array(bases, dtype=np.int64)
        cols, problems = _walk(buf, starts, starts + lengths, cnt, base)
        if not problems:
            out = _columns(buf, cols, cnt, base)
            problems = _not_utf8(out, cnt)
        if not problems:
            break
        for k in sorted(problems, reverse=True):
            key = keys[index[k]] if keys is not None else None
            bad[index[k]] = _scalar_error(chunks[index[k]], key, problems[k])
            for lst in (bodies, index, counts, bases):
                del lst[k]
    chunk_of = np.repeat(np.array(index, dtype=np.int64), cnt)
    return DecodedChunks(chunk_of, out[0], out[1], out[2], bad)


def _scalar_error(data: bytes | memoryview, key: bytes | None, found: tuple[type, str]
                  ) -> ChunkError:
    """The error the scalar decoder gives for a chunk the walk rejected (rare: only chunks
    whose CRC matched yet whose lengths lie), so both decoders report the same problem."""
    try:
        decode_chunk(data, key)
    except ChunkError as exc:
        return exc
    kind, text = found
    return kind(text)


def _columns(buf: np.ndarray, cols: dict[str, np.ndarray], counts: np.ndarray,
             bases: np.ndarray) -> tuple[np.ndarray, pa.StringArray, pa.BinaryArray]:
    offset = np.repeat(bases, counts) + cols["rel"]
    data = pa.py_buffer(buf)
    fv_valid = cols["fv_len"] >= 0
    filter_value = _ranges(buf, data, cols["fv_start"], np.maximum(cols["fv_len"], 0), fv_valid,
                           pa.binary_view(), pa.binary()).view(pa.string())
    v_valid = cols["v_len"] >= 0
    value = _ranges(buf, data, cols["v_start"], np.maximum(cols["v_len"], 0), v_valid,
                    pa.binary_view(), pa.binary())
    return offset, filter_value, value


def _not_utf8(out: tuple[np.ndarray, pa.StringArray, pa.BinaryArray], counts: np.ndarray
              ) -> dict[int, tuple[type, str]]:
    """Chunks (by position) with a filter value that is not UTF-8 (checked at once, then
    chunk by chunk only when the whole column fails)."""
    try:
        out[1].validate(full=True)
        return {}
    except pa.ArrowInvalid:
        pass
    problems: dict[int, tuple[type[ChunkError], str]] = {}
    start = 0
    for k, count in enumerate(counts.tolist()):
        try:
            out[1].slice(start, count).validate(full=True)
        except pa.ArrowInvalid:
            problems[k] = (BadLength, "a filter value is not UTF-8")
        start += count
    return problems
