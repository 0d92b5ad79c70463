"""The Redis clients a Spark Python worker keeps between tasks, one per endpoint.

Spark reuses its Python workers across tasks and batches.  A task that made its own
client paid a TCP connection, the login (``HELLO``/``AUTH``, ``SELECT``, ``CLIENT
SETINFO``) and redis-py's look-up of its own version in the package metadata, every time;
and what that look-up caches is rebuilt at each task, because pyspark's worker clears the
import caches before every task.  Load's worker processes grew by a few hundred bytes a task
that way (the soak in ``bench/results/soak.md``).  :func:`kept_client` hands a task the client its
process keeps for the endpoint instead, as the source keeps its Kafka consumers
(:mod:`sqe.source.kafka`).

A kept connection can go stale between tasks; each case is checked where it is cheap:

* the server restarted or closed it: redis-py's pool sees the closed socket when the task
  takes the connection and reconnects;
* a Sentinel promoted another master: each task asks a Sentinel for the master first (as a
  new client did), and redis-py drops the idle connections to the old one;
* a task failed with the client in hand: the client is closed and forgotten, so the next
  task starts from a new one.

A forked child never uses its parent's clients (their sockets are shared), and a process
keeps at most :data:`KEPT_ENDPOINTS` clients, closing the least recently used.

    >>> from sqe.clients.redis_endpoint import RedisEndpoint
    >>> with kept_client(RedisEndpoint("redis://127.0.0.1:6379/0")) as client:  # doctest: +SKIP
    ...     client.ping()
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqe.clients.redis_endpoint import RedisEndpoint

__all__ = ["KEPT_ENDPOINTS", "kept_client", "kept_count"]

#: How many endpoints' clients one process keeps.
KEPT_ENDPOINTS = 8

_kept: OrderedDict[RedisEndpoint, Any] = OrderedDict()
_owner = [os.getpid()]  # the process the kept clients belong to


def _mine() -> OrderedDict[RedisEndpoint, Any]:
    if _owner[0] != os.getpid():  # a forked child: the sockets are its parent's
        _kept.clear()
        _owner[0] = os.getpid()
    return _kept


def _take(endpoint: RedisEndpoint) -> Any:
    kept = _mine()
    client = kept.pop(endpoint, None)
    if client is None:
        client = endpoint.connect()
    kept[endpoint] = client  # the most recently used, last
    while len(kept) > KEPT_ENDPOINTS:
        _, oldest = kept.popitem(last=False)
        oldest.close()
    if endpoint.kind == "sentinel":
        client.connection_pool.get_master_address()  # drops connections to a demoted master
    return client


def _forget(endpoint: RedisEndpoint, client: Any) -> None:
    del _mine()[endpoint]
    client.close()


@contextmanager
def kept_client(endpoint: RedisEndpoint) -> Iterator[Any]:
    """The client this process keeps for ``endpoint`` (made on first use); closed and
    forgotten when the block raises, so a failed task never hands its connection on."""
    try:
        yield _take(endpoint)
    except BaseException:
        stale = _mine().get(endpoint)  # None only when the client could not be made
        if stale is not None:
            _forget(endpoint, stale)
        raise


def kept_count() -> int:
    """How many clients this process keeps (for tests and diagnostics)."""
    return len(_mine())
