"""MurmurHash64A, one value at a time and a whole Arrow column at once.

:func:`murmur64a` is stream-lib's ``MurmurHash.hash64``, exactly as SQE used it: for
PIDs (:func:`sqe.wire.keys.pid_for`), Bloom filter bits and, per value, SQE's ``Hash``.

SQE's ``Hash(value)`` (or ``Hash('murmur2', value)``) is stream-lib's
``MurmurHash.hash64`` -- MurmurHash64A with seed ``0xe17a1465`` over the
value's bytes (a string's UTF-8, a number's decimal text), returned as 8
bytes big-endian.  Spark has no built-in for it (``hash`` is 32-bit
Murmur3, ``xxhash64`` another hash), so it runs as an Arrow UDF, vectorised
with NumPy: round ``r`` mixes the ``r``-th 8-byte word of every value long
enough to have one (uint64 arithmetic wraps, as the algorithm wants).
:func:`murmur64a` is the scalar reference; a test holds them equal.

    >>> import pyarrow as pa
    >>> murmur64a_array(pa.array([b"ABCDEF"])).tolist() == [0x0F6106105304A543]
    True
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PID_SEED", "hash_bytes", "murmur64a", "murmur64a_array"]

#: The seed of PIDs and of SQE's ``Hash``.
PID_SEED = 0xE17A1465

_M64 = 0xC6A4A7935BD1E995
_R64 = 47
_MASK64 = 0xFFFFFFFFFFFFFFFF
_M = np.uint64(_M64)
_R = np.uint64(_R64)


def murmur64a(data: bytes, seed: int = PID_SEED) -> int:
    """MurmurHash64A of ``data`` as a signed int64, identical to stream-lib's ``hash64``.

    m = 0xc6a4a7935bd1e995, r = 47, little-endian 8-byte words; the seed is
    taken as an unsigned 32-bit value, as the Java code does (``seed & 0xffffffffL``).
    """
    length = len(data)
    h = ((seed & 0xFFFFFFFF) ^ (length * _M64)) & _MASK64
    n8 = length // 8
    for (k,) in struct.iter_unpack("<Q", data[: n8 * 8]):
        k = (k * _M64) & _MASK64
        k ^= k >> _R64
        k = (k * _M64) & _MASK64
        h ^= k
        h = (h * _M64) & _MASK64
    tail = data[n8 * 8 :]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M64) & _MASK64
    h ^= h >> _R64
    h = (h * _M64) & _MASK64
    h ^= h >> _R64
    return h - (1 << 64) if h >= 1 << 63 else h


def _le(buf: np.ndarray, pos: np.ndarray, width: np.ndarray | int) -> np.ndarray:
    """Little-endian uint64 of ``width`` (<= 8) bytes at ``pos``."""
    out = np.zeros(len(pos), dtype=np.uint64)
    for k in range(8):
        byte = buf[pos + k].astype(np.uint64)
        out |= np.where(k < np.asarray(width), byte, 0).astype(np.uint64) << np.uint64(8 * k)
    return out


def murmur64a_array(values: pa.Array, seed: int = PID_SEED) -> np.ndarray:
    """MurmurHash64A of every value (binary or string; NULL hashes as empty), as uint64."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = pc.cast(values, pa.binary()) if not pa.types.is_binary(values.type) else values
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + n + 1]
    data = values.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    buf = np.concatenate([raw, np.zeros(16, dtype=np.uint8)])
    start = offsets[:-1].astype(np.int64)
    length = (offsets[1:] - offsets[:-1]).astype(np.int64)
    with np.errstate(over="ignore"):
        h = np.uint64(seed & 0xFFFFFFFF) ^ (length.astype(np.uint64) * _M)
        words = length // 8
        for r in range(int(words.max()) if n else 0):
            rows = np.flatnonzero(words > r)
            k = _le(buf, start[rows] + 8 * r, 8) * _M
            k ^= k >> _R
            k *= _M
            hr = h[rows] ^ k
            h[rows] = hr * _M
        tail = length - 8 * words
        rows = np.flatnonzero(tail > 0)
        if len(rows):
            t = _le(buf, start[rows] + 8 * words[rows], tail[rows])
            h[rows] = (h[rows] ^ t) * _M
        h ^= h >> _R
        h *= _M
        h ^= h >> _R
    return h


def hash_bytes(values: pa.Array) -> pa.Array:
    """SQE's ``Hash``: 8 bytes big-endian of the hash of each value; NULL stays NULL."""
    h = murmur64a_array(values)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), len(h), [None, pa.py_buffer(h.astype(">u8").tobytes())])
    return pc.if_else(values.is_null(), pa.nulls(len(h), pa.binary()), fixed.cast(pa.binary()))
