"""Murmur2Partitioner: the Java Kafka client's default partitioner for keyed records.

``toPositive(murmur2(key)) % num_partitions`` with Kafka's murmur2 (seed
0x9747b28c), so records land where a Java producer would put them.  A NULL
key has no deterministic partition in Kafka (it is sticky/random), so it is
a ``ValueError`` here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from partitioners.base import check_num_partitions
from sqe.errors import WireError
from sqe.wire.arrays import to_numpy

__all__ = ["Murmur2Partitioner", "murmur2", "murmur2_array"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int (scalar reference)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = data[4 * n4 :]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """Vectorised murmur2 over a binary column (int32; NULL rows hash as empty keys).

    Rows are processed word by word across the whole column: step ``i`` mixes
    the i-th 4-byte word of every row long enough to have one.
    """
    arr = keys.cast(pa.binary()) if not pa.types.is_binary(keys.type) else keys
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
    starts = offs[:-1].astype(np.int64)
    lengths = np.diff(offs).astype(np.int64)
    if arr.null_count:
        lengths[~to_numpy(arr.is_valid())] = 0  # (Array.to_numpy would import pandas)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] else np.zeros(1, np.uint8)
    m = np.uint64(_M)
    mask = np.uint64(_MASK32)
    h = (np.uint64(_SEED) ^ lengths.astype(np.uint64)) & mask
    nwords = lengths // 4
    for i in range(int(nwords.max(initial=0))):
        rows = nwords > i
        pos = starts[rows] + 4 * i
        k = (
            data[pos].astype(np.uint64)
            | data[pos + 1].astype(np.uint64) << np.uint64(8)
            | data[pos + 2].astype(np.uint64) << np.uint64(16)
            | data[pos + 3].astype(np.uint64) << np.uint64(24)
        )
        k = (k * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        hr = (h[rows] * m) & mask
        h[rows] = hr ^ k
    rem = lengths % 4
    tail_start = starts + 4 * nwords
    tail = np.zeros(n, dtype=np.uint64)
    for j in range(3):
        rows = rem > j
        tail[rows] |= data[tail_start[rows] + j].astype(np.uint64) << np.uint64(8 * j)
    has_tail = rem > 0
    h[has_tail] = ((h[has_tail] ^ tail[has_tail]) * m) & mask
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    return h.astype(np.uint32).view(np.int32)


class Murmur2Partitioner:
    """Kafka's default keyed partitioning: ``(murmur2(key) & 0x7fffffff) % num_partitions``."""

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        """Scalar reference."""
        check_num_partitions(num_partitions)
        if key is None:
            raise WireError("Murmur2Partitioner needs a key; a NULL key has no fixed partition")
        return (murmur2(key) & 0x7FFFFFFF) % num_partitions

    def partition_array(self, keys: pa.Array, num_partitions: int) -> np.ndarray:
        """Vectorised form over a key column."""
        check_num_partitions(num_partitions)
        if keys.null_count:
            row = int(np.argmin(to_numpy(keys.is_valid())))
            raise WireError(f"Murmur2Partitioner needs keys; row {row} is NULL")
        h = murmur2_array(keys).astype(np.int64) & 0x7FFFFFFF
        return (h % num_partitions).astype(np.int32)
