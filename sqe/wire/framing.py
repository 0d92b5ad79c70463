"""The Confluent wire format of a record value: a magic byte 0, the schema's id in the
registry as 4 bytes big-endian, then the encoded record (Avro binary, or a Protobuf message
after its message indexes).

:func:`frame` writes it.  :func:`headers` reads the header of a whole batch of values at
once, from the Arrow array's buffers (no Python per value): each value's schema id, where its
payload starts, and what is wrong with the values that are not framed so (:data:`PROBLEMS`);
:func:`header_reference` is the same reading a value at a time, and
``tests/wire/test_framing.py`` holds them equal.

A Protobuf value's header goes on with its message indexes, the path of its message in the
schema's file (``[0]`` the first top-level message, ``[1, 0]`` the first message nested in
the second): a zigzag varint count, then that many zigzag varint indexes, except that the
common ``[0]`` is the single byte 0.  :func:`index_bytes` writes them, :func:`message_indexes`
reads one value's, and :func:`first_message` finds, from the buffers, the framed values whose
indexes are that single byte 0 (``tests/wire/test_protobuf.py`` holds it to the reference).

Example::

    >>> from sqe.wire.arrays import binaries
    >>> ids, problems = headers(binaries([frame(7, b"x"), b'{"a": 1}', b"{", None]))
    >>> ids.tolist(), problems.tolist()
    ([7, -1, -1, -1], [0, 1, 2, 3])
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sqe.errors import WireError
from sqe.wire.arrays import present, value_offsets

__all__ = ["HEADER_BYTES", "MAGIC", "OK", "PROBLEMS", "first_message", "frame",
           "header_reference", "headers", "index_bytes", "message_indexes", "problem_text"]

MAGIC = 0
#: The magic byte and the schema id.
HEADER_BYTES = 5

#: A value's problem codes: framed, a wrong first byte, shorter than the header, NULL.
OK, WRONG_MAGIC, SHORT, NULL = 0, 1, 2, 3
PROBLEMS = {OK: "", WRONG_MAGIC: "wrong magic byte", SHORT: "shorter than the header",
            NULL: "no value"}


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` in the wire format, as schema ``schema_id``'s."""
    return bytes([MAGIC]) + int(schema_id).to_bytes(4, "big") + payload


def problem_text(value: bytes, code: int) -> str:
    """The sentence part that says why ``value`` is not framed (``code`` from :func:`headers`)."""
    if code == WRONG_MAGIC:
        return (f"the value is not in the Confluent wire format: its first byte is "
                f"0x{value[0]:02x}, not the magic byte 0x00")
    if code == SHORT:
        return (f"the value is not in the Confluent wire format: {len(value)} "
                f"byte{'' if len(value) == 1 else 's'}, shorter than its {HEADER_BYTES}-byte header")
    return "the value is NULL"


def header_reference(value: bytes | None) -> tuple[int, int]:
    """``(schema id, problem code)`` of one value (id -1 unless it is framed)."""
    if value is None:
        return -1, NULL
    if len(value) < HEADER_BYTES:
        return -1, SHORT
    if value[0] != MAGIC:
        return -1, WRONG_MAGIC
    return int.from_bytes(value[1:HEADER_BYTES], "big"), OK


def headers(values: pa.Array) -> np.ndarray:
    """``[ids, problems]`` (two int64 rows) of a binary array's values: each value's schema
    id (-1 unless framed) and its problem code (:data:`OK` when framed)."""
    n = len(values)
    out = np.full((2, n), -1, dtype=np.int64)
    if n == 0:
        return out
    data_buf = values.buffers()[2]
    offsets = value_offsets(values)
    data = (np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None
            else np.zeros(0, dtype=np.uint8))
    starts, lengths = offsets[:-1], np.diff(offsets)
    valid = present(values)
    long_enough = valid & (lengths >= HEADER_BYTES)
    at = starts[long_enough]
    magic = np.full(n, -1, dtype=np.int64)
    magic[long_enough] = data[at]
    framed = long_enough & (magic == MAGIC)
    ids = np.zeros(int(framed.sum()), dtype=np.int64)
    at = starts[framed]
    for shift, k in ((24, 1), (16, 2), (8, 3), (0, 4)):
        ids |= data[at + k].astype(np.int64) << shift
    out[0, framed] = ids
    out[1] = np.where(~valid, NULL, np.where(~long_enough, SHORT,
                                             np.where(framed, OK, WRONG_MAGIC)))
    return out


def _zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def index_bytes(indexes: list[int] | tuple[int, ...]) -> bytes:
    """The message indexes ``indexes`` as a Protobuf value's header carries them."""
    if list(indexes) == [0]:
        return b"\x00"
    return b"".join(_zigzag(v) for v in (len(indexes), *indexes))


def _varint(data: bytes | memoryview, at: int, end: int) -> tuple[int, int]:
    """The zigzag varint at ``data[at]`` and where it ends."""
    value = shift = 0
    while True:
        if at >= end:
            raise WireError("ends inside its message indexes")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        if shift > 63:
            raise WireError("has a message index longer than 10 bytes")


def message_indexes(data: bytes | memoryview, at: int = HEADER_BYTES, end: int | None = None
                    ) -> tuple[tuple[int, ...], int]:
    """The message indexes of the Protobuf value in ``data[at:end]`` (``at`` just after its
    header) and where its message starts; a :class:`ValueError` says what is wrong (a
    sentence part, as "the value ... <reason>")."""
    end = len(data) if end is None else end
    count, at = _varint(data, at, end)
    if count == 0:
        return (0,), at
    if not 0 < count <= end - at:
        raise WireError(f"has a message index count of {count}, with {end - at} "
                         f"byte{'' if end - at == 1 else 's'} left")
    indexes = []
    for _ in range(count):
        index, at = _varint(data, at, end)
        indexes.append(index)
    return tuple(indexes), at


def first_message(values: pa.Array, problems: np.ndarray) -> np.ndarray:
    """True where a value is framed (``problems`` from :func:`headers`) and its message
    indexes are the single byte 0 (``[0]``): its message starts one byte after the header."""
    offsets = value_offsets(values)
    framed = (problems == OK) & (np.diff(offsets) > HEADER_BYTES)
    data_buf = values.buffers()[2]
    if not framed.any() or data_buf is None:
        return framed
    data = np.frombuffer(data_buf, dtype=np.uint8)
    out = framed.copy()
    out[framed] = data[offsets[:-1][framed] + HEADER_BYTES] == 0
    return out
