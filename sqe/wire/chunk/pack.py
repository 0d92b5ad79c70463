"""Packing many messages into chunks at once (the vectorised twin of ``encode_chunk``).

The Kafka state's writer calls :func:`encode_chunks` with all rows of a task:
chunk boundaries are found per chunk (never across a change of source
partition or a step back in offset), every message is encoded by Arrow in one
step, each chunk's body is a slice of that buffer, and the Bloom filters of all
chunks are set with one NumPy scatter.  Each chunk comes with its Kafka key, the
StreamMetadata of its last message, which its CRC covers.
:func:`sqe.wire.chunk.codec.encode_chunk` is the scalar reference; a test holds the two
equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqe.errors import WireError
from sqe.wire.arrays import scalar, to_numpy
from sqe.wire.chunk.bloom import BloomFilter, value_bits
from sqe.wire.chunk.codec import _CODECS, _MIN_MESSAGE_BYTES, _NO_FILTER_VALUE, Codec, frame_chunk
from sqe.wire.keys import encode_keys

_EMPTY = scalar(b"", pa.binary())
_NO_LENGTH = scalar(-1, pa.int32())
_ZERO = scalar(0, pa.int32())

__all__ = ["EncodedChunk", "encode_chunks"]


@dataclass(frozen=True)
class EncodedChunk:
    """One chunk written by :func:`encode_chunks`: its messages ``[start, stop)`` of the input,
    its Kafka key (the StreamMetadata of its last message) and its bytes."""

    start: int
    stop: int
    key: bytes
    data: bytes


def _boundaries(partition: np.ndarray, offset: np.ndarray, sizes: np.ndarray,
                max_messages: int, max_bytes: int) -> list[tuple[int, int]]:
    """Deterministic chunk ranges: never across a change of source partition or a step back
    in offset; at most ``max_messages``, ``max_bytes`` of body (a larger message alone) and
    an offset span below 2**32.  One loop step per chunk, not per message."""
    n = len(offset)
    breaks = np.flatnonzero((partition[1:] != partition[:-1]) | (offset[1:] < offset[:-1])) + 1
    run_ends = np.append(breaks, n)
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    out = []
    i, run = 0, 0
    while i < n:
        while run_ends[run] <= i:
            run += 1
        end = int(run_ends[run])
        j = min(end, i + max_messages)
        by_bytes = int(np.searchsorted(cum, cum[i] + max_bytes, side="right")) - 1
        j = min(j, max(by_bytes, i + 1))
        by_span = i + int(np.searchsorted(offset[i:end], offset[i] + 2**32, side="left"))
        j = min(j, by_span)
        out.append((i, j))
        i = j
    return out


def encode_chunks(pid: np.ndarray, partition: np.ndarray, offset: np.ndarray,
                  filter_value: pa.Array, value: pa.Array, max_messages: int = 1000,
                  max_bytes: int = 1 << 20, filter_size: int = 16, codec: Codec = "none"
                  ) -> list[EncodedChunk]:
    """Pack messages (in input order; their StreamMetadata ``pid``, ``partition``,
    ``offset``) into chunks, vectorised: the twin of ``encode_chunk``.

    Every message is encoded at once by Arrow (``binary_join_element_wise`` of its
    fixed fields, filter value and value), each chunk's body is a slice of that
    buffer, and the Bloom filters of all chunks are set with one NumPy scatter.
    """
    if codec not in _CODECS:
        raise WireError(f"chunk codec must be one of {', '.join(_CODECS)}, got {codec!r}")
    n = len(offset)
    if n == 0:
        return []
    partition = np.asarray(partition, dtype=np.int64)
    offset = np.asarray(offset, dtype=np.int64)
    fv = pc.cast(filter_value, pa.binary())
    fv_len = to_numpy(pc.fill_null(pc.binary_length(fv), _NO_LENGTH))
    if (fv_len >= _NO_FILTER_VALUE).any():
        raise WireError(f"a filter value is longer than {_NO_FILTER_VALUE - 1} bytes")
    v_len = to_numpy(pc.fill_null(pc.binary_length(value), _NO_LENGTH))
    sizes = _MIN_MESSAGE_BYTES + np.maximum(fv_len, 0) + np.maximum(v_len, 0)
    ranges = _boundaries(partition, offset, sizes, max_messages, max_bytes)
    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    stops = np.array([r[1] for r in ranges], dtype=np.int64)
    chunk_of = np.repeat(np.arange(len(ranges)), stops - starts)
    rel = offset - offset[starts][chunk_of]
    head = np.zeros((n, 6), dtype=np.uint8)
    head[:, :4] = rel.astype(">u4").view(np.uint8).reshape(n, 4)
    head[:, 4:] = np.where(fv_len < 0, _NO_FILTER_VALUE, fv_len).astype(">u2").view(
        np.uint8).reshape(n, 2)
    mid = v_len.astype(">i4").view(np.uint8).reshape(n, 4)
    fixed = pa.binary(6)
    parts = [
        pa.FixedSizeBinaryArray.from_buffers(fixed, n, [None, pa.py_buffer(head.tobytes())]),
        pc.fill_null(fv, _EMPTY),
        pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(mid.tobytes())]),
        pc.fill_null(pc.cast(value, pa.binary()), _EMPTY),
    ]
    joined = pc.binary_join_element_wise(*[pc.cast(p, pa.binary()) for p in parts],
                                         _EMPTY)
    msg_offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset:
                                                                      joined.offset + n + 1]
    data = joined.buffers()[2]
    blooms = _blooms(fv, chunk_of, len(ranges), filter_size) if filter_size else None
    last = stops - 1
    keys = encode_keys(np.asarray(pid, dtype=np.int64)[last], partition[last], offset[last])
    out = []
    for k, (i, j) in enumerate(ranges):
        body = data[int(msg_offsets[i]):int(msg_offsets[j])].to_pybytes()
        bloom = blooms[k].tobytes() if blooms is not None else b""
        key = keys[k].as_py()
        out.append(EncodedChunk(i, j, key, frame_chunk(body, j - i, int(offset[i]), bloom,
                                                       codec, key)))
    return out


def _blooms(fv: pa.Array, chunk_of: np.ndarray, chunks: int, size: int) -> np.ndarray:
    """The Bloom filter bytes of every chunk, as a (chunks, size) uint8 matrix."""
    BloomFilter(size)  # validates the size
    matrix = np.zeros((chunks, size), dtype=np.uint8)
    encoded = fv.dictionary_encode()
    indices = to_numpy(encoded.indices.fill_null(_ZERO))
    valid = ~to_numpy(encoded.is_null())
    words = [bytes(v).decode("utf-8") for v in encoded.dictionary.to_pylist()]
    bits = np.array([value_bits(w, size) for w in words], dtype=np.int64).reshape(-1, 2)
    np.bitwise_or.at(matrix[:, 0], chunk_of[~valid], 1)  # bit 0: a message without a value
    for b in (0, 1):
        bit = bits[indices[valid].astype(np.int64), b] if len(bits) else np.zeros(0, np.int64)
        np.bitwise_or.at(matrix, (chunk_of[valid], bit >> 3), (1 << (bit & 7)).astype(np.uint8))
    return matrix
