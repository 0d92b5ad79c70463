"""Redis commands encoded straight from Arrow columns: one ``HSET`` of many fields, no Python
object per row.

A Redis state staged for the HWM commit (:func:`state.redis.sink.stage_redis`) writes every row of a
batch into one hash.  Sent the per-row way, through redis-py's pipeline (one ``hset`` call per
row, each argument checked and encoded in Python), that costs about 5 µs of Python per row:
1.3 s for 250,000 rows, against 0.13 s for the same rows as a few long ``HSET`` commands whose
bytes Arrow builds (``bench/results/throughput.md``).

The wire form is RESP: a command is ``*<n>\\r\\n`` then each argument as a bulk string,
``$<length>\\r\\n<bytes>\\r\\n``.  :func:`hset_commands` encodes every (field, value) pair of a
batch in one Arrow kernel call (:func:`pair_bulks`) and cuts the rows into commands of at most
:data:`MAX_COMMAND_BYTES`; each command's body is a slice of one Arrow buffer.
:func:`resp_command` is the scalar reference (argument by argument, as redis-py packs a
command), and the tests hold the two equal.

Example::

    >>> import pyarrow as pa
    >>> cmds = list(hset_commands(b"h", pa.array(["f"]), pa.array(["v"])))
    >>> b"".join(bytes(p) for p in cmds[0].parts)
    b'*4\\r\\n$4\\r\\nHSET\\r\\n$1\\r\\nh\\r\\n$1\\r\\nf\\r\\n$1\\r\\nv\\r\\n'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqe.errors import ArgumentError, WireError
from sqe.wire.arrays import scalar

__all__ = ["MAX_COMMAND_BYTES", "HsetCommand", "hset_commands", "pair_bulks", "resp_command",
           "send_hsets"]

#: The most bytes one HSET command carries (Redis buffers a whole command before it runs it;
#: its own cap on a client's query buffer is 1 GB).
MAX_COMMAND_BYTES = 8 * 1024 * 1024
#: The RESP pieces between a pair's bulk strings, as Arrow scalars.
_BULK = {text: scalar(text.encode(), pa.binary()) for text in ("$", "\r\n", "\r\n$", "")}


def resp_command(*args: bytes | str | int) -> bytes:
    """One command in RESP, argument by argument: the scalar reference of this module."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _binary(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values.cast(pa.binary())
    if pa.types.is_binary(values.type):
        return values
    raise ArgumentError(f"a Redis argument column must be string or binary, not {values.type}")


def _lengths(values: pa.Array) -> pa.Array:
    return pc.cast(pc.cast(pc.binary_length(values), pa.string()), pa.binary())


def pair_bulks(fields: pa.Array, values: pa.Array) -> pa.Array:
    """Per row, its field and value as two RESP bulk strings, ``$<n>\\r\\n<field>\\r\\n$<m>\\r\\n
    <value>\\r\\n`` (a NULL value is the empty string; a NULL field is refused)."""
    f = _binary(fields)
    if f.null_count:
        raise WireError(f"{f.null_count} of {len(f)} hash fields are NULL")
    v = pc.fill_null(_binary(values), _BULK[""])
    s = _BULK
    return pc.binary_join_element_wise(s["$"], _lengths(f), s["\r\n"], f, s["\r\n$"],
                                       _lengths(v), s["\r\n"], v, s["\r\n"], s[""])


@dataclass(frozen=True)
class HsetCommand:
    """One HSET command: its bytes in pieces (the header, then a slice of Arrow's buffer)."""

    parts: list[bytes | memoryview]
    rows: int


def hset_commands(key: bytes, fields: pa.Array, values: pa.Array,
                  max_bytes: int = MAX_COMMAND_BYTES) -> Iterator[HsetCommand]:
    """``HSET key field value ...`` for every row, in commands of at most ``max_bytes`` of pairs
    (a row bigger than that is a command of its own)."""
    n = len(fields)
    if n == 0:
        return
    pairs = pair_bulks(fields, values)
    _, offsets_buf, data = pairs.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1,
                            offset=pairs.offset * 4).astype(np.int64)
    ends = offsets[1:]  # where each row's pair ends in the buffer
    start, body = 0, memoryview(data)
    while start < n:
        stop = max(start + 1, int(np.searchsorted(ends, offsets[start] + max_bytes, side="right")))
        rows = stop - start
        head = b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n" % (2 + 2 * rows, len(key), key)
        yield HsetCommand([head, body[offsets[start]:offsets[stop]]], rows)
        start = stop


def send_hsets(connection: Any, key: bytes, fields: pa.Array, values: pa.Array,
               expire_seconds: int = 0) -> int:
    """Send the HSETs of :func:`hset_commands` (each followed by ``EXPIRE key``, when
    ``expire_seconds``) on a redis-py ``Connection``, one round trip per command; the rows sent.
    An error reply raises redis-py's ``ResponseError``; the caller disconnects the connection
    on any error (replies may be left unread)."""
    expire = resp_command(b"EXPIRE", key, expire_seconds) if expire_seconds else b""
    sent = 0
    for command in hset_commands(key, fields, values):
        connection.send_packed_command([*command.parts, expire] if expire else command.parts)
        connection.read_response()
        if expire:
            connection.read_response()
        sent += command.rows
    return sent
