"""The HSETs built from Arrow columns against the scalar reference, redis-py's own packing, and a
real Redis."""

from __future__ import annotations

import pyarrow as pa
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.connection import Connection

from state.redis.protocol import hset_commands, pair_bulks, resp_command, send_hsets

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_bytes = st.binary(max_size=12) | st.sampled_from([b"\r\n", b"$3\r\n", b"*1\r\n", b""])


def _joined(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


@given(key=st.binary(min_size=1, max_size=20),
       rows=st.lists(st.tuples(_text, _text | st.none()), max_size=40),
       max_bytes=st.integers(min_value=1, max_value=300),
       offset=st.integers(min_value=0, max_value=3))
@settings(max_examples=300, deadline=None)
def test_hset_commands_equal_the_scalar_reference(key, rows, max_bytes, offset):
    padding = [("pad", "pad")] * offset  # a sliced input: the columns start inside their buffers
    fields = pa.array([f for f, _ in padding + rows], pa.string()).slice(offset)
    values = pa.array([v for _, v in padding + rows], pa.string()).slice(offset)
    commands = list(hset_commands(key, fields, values, max_bytes=max_bytes))
    assert sum(c.rows for c in commands) == len(rows)
    at = 0
    for command in commands:
        chunk = rows[at:at + command.rows]
        at += command.rows
        args = [a.encode() for f, v in chunk for a in (f, v or "")]
        assert _joined(command.parts) == resp_command(b"HSET", key, *args)
        pairs = _joined(command.parts[1:])
        assert command.rows == 1 or len(pairs) <= max_bytes  # only a lone row may exceed it


@given(fields=st.lists(_bytes, max_size=20), data=st.data())
@settings(max_examples=200, deadline=None)
def test_binary_columns_and_redis_py_packing_agree(fields, data):
    values = data.draw(st.lists(_bytes | st.none(), min_size=len(fields), max_size=len(fields)))
    commands = list(hset_commands(b"stage", pa.array(fields, pa.binary()),
                                  pa.array(values, pa.binary())))
    args = [a for f, v in zip(fields, values, strict=True) for a in (f, v or b"")]
    if fields:
        packed = _joined(Connection().pack_command("HSET", b"stage", *args))
        assert _joined(commands[0].parts) == packed
    else:
        assert commands == []


def test_a_null_field_is_refused_and_a_null_value_is_empty():
    with pytest.raises(ValueError, match="1 of 2 hash fields are NULL"):
        pair_bulks(pa.array(["a", None]), pa.array(["1", "2"]))
    assert pair_bulks(pa.array(["a"]), pa.array([None], pa.string())).to_pylist() == \
        [b"$1\r\na\r\n$0\r\n\r\n"]


def test_send_hsets_writes_a_real_hash_with_its_expiry(redis_url):
    client = redis.Redis.from_url(redis_url)
    fields = [f"{len(str(i))}:k{i}\r\n" for i in range(5_000)] + ["dup", "dup"]
    values = [("v" * (i % 50)) if i % 7 else None for i in range(5_000)] + ["first", "last"]
    connection = client.connection_pool.get_connection()
    try:
        sent = send_hsets(connection, b"sqe:{t}:stage", pa.array(fields), pa.array(values),
                          expire_seconds=300)
    finally:
        client.connection_pool.release(connection)
    assert sent == len(fields)
    got = client.hgetall("sqe:{t}:stage")
    want = {f.encode(): (v or "").encode() for f, v in zip(fields, values, strict=True)}
    assert got == want  # a field given twice keeps its last value, as one HSET per row would
    assert 0 < client.ttl("sqe:{t}:stage") <= 300


def test_an_error_reply_is_raised(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.set("a-string", "x")
    connection = client.connection_pool.get_connection()
    try:
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            send_hsets(connection, b"a-string", pa.array(["f"]), pa.array(["v"]))
    finally:
        connection.disconnect()
        client.connection_pool.release(connection)
