"""StreamMetadata: the 20-byte record key that makes replay filtering possible.

Owns the key's wire format and the producer id (PID):

* :class:`StreamMetadata` -- ``(pid, partition, offset)``, 20 bytes big-endian
  (pid int64, partition int32, offset int64), byte-compatible with the
  original Java SQE (``Longs.toByteArray`` order).
* :func:`pid_for` -- :func:`~sqe.wire.murmur.murmur64a` (stream-lib's
  ``MurmurHash.hash64``, as SQE used) of the UTF-8 bytes of
  ``topology + stream + secondary id``.
* :func:`decode_keys` / :func:`encode_keys` -- the vectorised (NumPy over
  Arrow buffers) forms used on hot paths; :meth:`StreamMetadata.from_bytes`
  and :meth:`StreamMetadata.to_bytes` are their scalar reference.

Example::

    >>> StreamMetadata(1234567890123, 7, 42).to_bytes().hex()
    '0000011f71fb04cb00000007000000000000002a'
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sqe.errors import ArgumentError, WireError
from sqe.wire.arrays import to_numpy
from sqe.wire.murmur import PID_SEED, murmur64a

__all__ = [
    "CHUNK_INDEX_BITS",
    "KEY_SIZE",
    "PID_SEED",
    "StreamMetadata",
    "murmur64a",
    "pid_for",
    "kafka_secondary_id",
    "decode_keys",
    "encode_keys",
]

KEY_SIZE = 20

#: A chunk message's carried offset for the next hop is ``chunk record offset << 24 | index``:
#: a chunk holds at most 64 MiB / 10 bytes < 2**24 messages, so these stay increasing per
#: partition.
CHUNK_INDEX_BITS = 24

_KEY = struct.Struct(">qiq")
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _check_range(name: str, value: int, bounds: tuple[int, int]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an integer, got {type(value).__name__}")
    if not bounds[0] <= int(value) <= bounds[1]:
        bits = 64 if bounds is _INT64 else 32
        raise WireError(f"{name} {value} does not fit in a signed {bits}-bit integer")


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    """Where a record came from: producer id, source partition, source offset."""

    pid: int
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _check_range("pid", self.pid, _INT64)
        _check_range("partition", self.partition, _INT32)
        _check_range("offset", self.offset, _INT64)

    def to_bytes(self) -> bytes:
        """The 20-byte big-endian key: pid int64, partition int32, offset int64."""
        return _KEY.pack(self.pid, self.partition, self.offset)

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamMetadata:
        """Parse a 20-byte key; any other length is a ``ValueError``."""
        if data is None:
            raise WireError("stream metadata key is NULL; expected exactly 20 bytes")
        if len(data) != KEY_SIZE:
            raise WireError(
                f"stream metadata key must be exactly {KEY_SIZE} bytes, got {len(data)}"
            )
        return cls(*_KEY.unpack(bytes(data)))


def pid_for(topology: str, stream: str, secondary_id: str) -> int:
    """The PID of a stream: ``murmur64a(utf8(topology + stream + secondary_id))``.

    Args:
        topology: the topology name (``--name``, default the file's stem).
        stream: the stream's ``streamName``.
        secondary_id: where the stream reads, ``"<cluster id>/<topic>"`` for Kafka.

    Returns:
        The signed 64-bit PID that the stream's output keys carry.
    """
    return murmur64a((topology + stream + secondary_id).encode("utf-8"))


def kafka_secondary_id(cluster_id: str | None, brokers: Iterable[str], topic: str) -> str:
    """Secondary id of a Kafka stream: ``"<cluster id>/<topic>"``.

    When the broker reports no cluster id, the sorted, comma-joined bootstrap
    list stands in for it, so the PID is still stable across processes.
    """
    source = cluster_id or ",".join(sorted(b.strip() for b in brokers))
    return f"{source}/{topic}"


def _as_binary(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    t = keys.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return keys
    if pa.types.is_null(t):
        return pa.nulls(len(keys), pa.binary())
    raise ArgumentError(f"keys must be a binary Arrow array, got {t}")


def decode_keys(
    keys: pa.Array | pa.ChunkedArray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode a column of 20-byte StreamMetadata keys at once.

    No per-row Python: the key bytes are gathered straight from the Arrow data
    buffer with NumPy.

    Args:
        keys: a binary, large binary or fixed-size binary Arrow array (or chunked array).

    Returns:
        ``(pid int64[], partition int32[], offset int64[], valid bool[])``; ``valid`` is
        False for NULL keys and keys that are not exactly 20 bytes, whose pid, partition
        and offset are 0.

    Raises:
        TypeError: ``keys`` is not a binary Arrow array.
    """
    arr = _as_binary(keys)
    n = len(arr)
    pid = np.zeros(n, dtype=np.int64)
    partition = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.int64)
    if n == 0:
        return pid, partition, offset, np.zeros(0, dtype=bool)
    buffers = arr.buffers()
    if buffers[0] is not None and arr.null_count:
        present = to_numpy(arr.is_valid())
    else:
        present = np.ones(n, dtype=bool)
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        valid = present & (width == KEY_SIZE)
        starts = (np.arange(n, dtype=np.int64) + arr.offset) * width
    else:
        odt = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        offs = np.frombuffer(buffers[1], dtype=odt)[arr.offset : arr.offset + n + 1]
        starts = offs[:-1].astype(np.int64)
        valid = present & (np.diff(offs) == KEY_SIZE)
    if not valid.any():
        return pid, partition, offset, valid
    # Overlapping big-endian views of the data buffer, one element starting at every byte:
    # each field is one gather of n values (no (n, 20) index and byte arrays).
    data = buffers[-1]
    size = data.size
    at8 = np.ndarray((size - 7,), dtype=">i8", buffer=data, strides=(1,))
    at4 = np.ndarray((size - 3,), dtype=">i4", buffer=data, strides=(1,))
    if valid.all():
        pid[:], partition[:], offset[:] = at8[starts], at4[starts + 8], at8[starts + 12]
    else:
        first = starts[valid]
        pid[valid], partition[valid], offset[valid] = at8[first], at4[first + 8], at8[first + 12]
    return pid, partition, offset, valid


def _int_column(name: str, values: object, dtype: type, bounds: tuple[int, int]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise WireError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ArgumentError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype != dtype:
        lo, hi = arr.min(), arr.max()
        if int(lo) < bounds[0] or int(hi) > bounds[1]:
            bad = lo if int(lo) < bounds[0] else hi
            raise WireError(f"{name} value {bad} does not fit in {np.dtype(dtype).name}")
    return arr.astype(dtype, copy=False)


def encode_keys(pid: object, partition: object, offset: object) -> pa.BinaryArray:
    """Encode equal-length integer columns into 20-byte StreamMetadata keys.

    Args:
        pid: the PIDs, int64 values (anything ``numpy.asarray`` takes).
        partition: the source partitions, int32 values.
        offset: the source offsets, int64 values.

    Returns:
        A ``pyarrow.BinaryArray`` of the big-endian keys, one per row.

    Raises:
        ValueError: the columns differ in length, or a value does not fit its type.
        TypeError: a column does not hold integers.
    """
    p = _int_column("pid", pid, np.int64, _INT64)
    q = _int_column("partition", partition, np.int32, _INT32)
    o = _int_column("offset", offset, np.int64, _INT64)
    if not len(p) == len(q) == len(o):
        raise WireError(
            f"pid, partition and offset must have equal lengths, got {len(p)}, {len(q)}, {len(o)}"
        )
    n = len(p)
    rows = np.empty((n, KEY_SIZE), dtype=np.uint8)
    rows[:, 0:8] = p.astype(">i8").view(np.uint8).reshape(n, 8)
    rows[:, 8:12] = q.astype(">i4").view(np.uint8).reshape(n, 4)
    rows[:, 12:20] = o.astype(">i8").view(np.uint8).reshape(n, 8)
    offsets = np.arange(0, KEY_SIZE * (n + 1), KEY_SIZE, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(rows.tobytes())]
    )
