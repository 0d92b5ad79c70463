"""kept_client: one Redis client per endpoint and process, reused by later tasks, reconnected
after a server restart, forgotten after a failure, never shared with a forked child.  A real
``redis-server`` (the session's, and one this test restarts)."""

from __future__ import annotations

import os

import pytest
import redis

import sqe.clients.redis_clients as redis_clients
from sqe.clients.redis_clients import KEPT_ENDPOINTS, kept_client, kept_count
from sqe.clients.redis_endpoint import RedisEndpoint
from support.fault_services import RestartableRedis

pytestmark = pytest.mark.redis


@pytest.fixture(autouse=True)
def _nothing_kept(monkeypatch):
    """Each test starts with no kept client and closes what it made."""
    for client in redis_clients._kept.values():
        client.close()
    redis_clients._kept.clear()
    yield
    for client in redis_clients._kept.values():
        client.close()
    redis_clients._kept.clear()


def _closed(client) -> bool:
    """Whether every connection of ``client``'s pool is closed."""
    pool = client.connection_pool
    return all(c._sock is None for c in pool._available_connections)


def _other_db(url: str, db: int) -> RedisEndpoint:
    return RedisEndpoint(url.rsplit("/", 1)[0] + f"/{db}")


def test_a_process_keeps_one_client_per_endpoint_for_its_later_tasks(redis_url):
    endpoint = RedisEndpoint(redis_url)
    with kept_client(endpoint) as first:
        first.set("k", "v")
    with kept_client(RedisEndpoint(redis_url)) as again:  # an equal endpoint, as unpickled
        assert again is first
        assert again.get("k") == b"v"
        assert again.connection_pool._created_connections == 1  # one socket
    with kept_client(_other_db(redis_url, 0)) as other:
        assert other is not first
    assert kept_count() == 2


def test_a_task_that_fails_closes_and_forgets_its_client(redis_url):
    endpoint = RedisEndpoint(redis_url)
    with pytest.raises(ZeroDivisionError):
        with kept_client(endpoint) as failed:
            failed.ping()
            _ = 1 / 0
    assert kept_count() == 0
    assert _closed(failed)
    with kept_client(endpoint) as fresh:
        assert fresh is not failed and fresh.ping()


def test_a_kept_client_reconnects_to_a_restarted_server(tmp_path):
    server = RestartableRedis(tmp_path / "redis", aof=True)
    server.start()
    try:
        endpoint = RedisEndpoint(server.url())
        with kept_client(endpoint) as client:
            client.set("k", "before")
        server.crash()
        server.start()  # the kept connection's socket is closed now
        with kept_client(endpoint) as again:
            assert again is client
            assert again.get("k") == b"before"
            again.set("k", "after")
    finally:
        server.stop()


def test_the_least_recently_used_client_is_closed_beyond_the_limit(redis_url):
    endpoints = [_other_db(redis_url, db) for db in range(KEPT_ENDPOINTS + 1)]
    clients = []
    for endpoint in endpoints:
        with kept_client(endpoint) as client:
            client.ping()
            clients.append(client)
    assert kept_count() == KEPT_ENDPOINTS
    assert _closed(clients[0]) and not _closed(clients[1])
    with kept_client(endpoints[-1]) as last:
        assert last is clients[-1]


def test_a_forked_child_makes_its_own_client(redis_url):
    endpoint = RedisEndpoint(redis_url)
    with kept_client(endpoint) as parent:
        parent.set("k", "v")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report whether it got a client of its own that works
        try:
            with kept_client(endpoint) as mine:
                ok = mine is not parent and mine.get("k") == b"v"
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(child, 0)
    os.close(read)
    with kept_client(endpoint) as still:  # the parent's connection is untouched
        assert still is parent and still.get("k") == b"v"


def test_a_client_that_cannot_connect_is_not_kept(tmp_path):
    server = RestartableRedis(tmp_path / "redis", aof=False)  # never started
    with pytest.raises(redis.ConnectionError):
        with kept_client(RedisEndpoint(server.url())) as client:
            client.ping()
    assert kept_count() == 0
