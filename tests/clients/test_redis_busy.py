"""A Redis running a long Lua script answers every other client ``BUSY``: SQE's clients send
again until it ends (commands, pipelines, scripts, a new connection's SELECT, the HWM store's
commit), and say in one sentence when it lasts longer than they wait.  A real ``redis-server``
of the test's own, its ``busy-reply-threshold`` lowered to 100 ms; the long script is real."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from sqe.clients.redis_busy import BusyRetry, RedisBusyError
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.ledger.hwm import HwmStore
from support.fault_services import RestartableRedis

pytestmark = pytest.mark.redis

# Runs ARGV[1] seconds by the server's clock, then returns 1.
LONG_SCRIPT = """
local function now() local t = redis.call('TIME') return t[1] + t[2] / 1e6 end
local stop = now() + tonumber(ARGV[1])
while now() < stop do end
return 1
"""


@pytest.fixture
def server(tmp_path) -> Iterator[RestartableRedis]:
    own = RestartableRedis(tmp_path / "redis", aof=False)
    try:
        own.start()
        client = redis.Redis.from_url(own.url())
        client.config_set("busy-reply-threshold", 100)  # lua-time-limit, in ms
        client.close()
        yield own
    finally:
        own.stop()  # by its process, even when the test or the set-up failed


class LongScript:
    """A script of ``seconds`` run by another client in a thread; entered once Redis is busy."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=60)
        self.seconds = seconds
        self.result: object = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result = self.client.eval(LONG_SCRIPT, 0, self.seconds)
        except redis.ResponseError as exc:  # SCRIPT KILL
            self.result = exc

    def __enter__(self) -> LongScript:
        self.thread.start()
        probe = redis.Redis.from_url(self.url)  # redis-py's own client: BUSY is an error
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                probe.ping()
            except redis.ResponseError as exc:
                assert str(exc).startswith("BUSY ")
                self.busy_since = time.monotonic()
                probe.close()
                return self
            time.sleep(0.02)
        raise AssertionError("the long script never made Redis busy")

    def __exit__(self, *exc: object) -> None:
        self.thread.join(self.seconds + 30)
        self.client.close()


def test_commands_pipelines_and_scripts_refused_as_busy_are_sent_again_until_it_ends(server):
    endpoint = RedisEndpoint(server.url(1))
    before = endpoint.connect()  # a connection made (and SELECTed) before the script
    before.ping()
    with LongScript(server.url(), 1.5) as script:
        before.hset("h", "f", "1")
        waited = time.monotonic() - script.busy_since
        after = endpoint.connect()  # a new connection: its SELECT 1 is refused too
        assert after.hget("h", "f") == b"1"
        pipe = after.pipeline(transaction=False)
        pipe.set("k", "v").get("k")
        assert pipe.execute() == [True, b"v"]
        assert after.register_script("return ARGV[1]")(args=["x"]) == b"x"
    assert script.result == 1
    assert waited > 1.0  # hset waited for the script (it ran 1.5 s, busy after 0.1 s)
    assert redis.Redis.from_url(server.url(1)).hget("h", "f") == b"1"
    before.close()
    after.close()


def test_the_hwm_store_commits_once_another_clients_script_ends(server):
    store = HwmStore.from_url(server.url(2), "consumer", 3600)
    with LongScript(server.url(), 1.0):
        assert store.commit(0, {(1, 0): 41}, offsets='{"t":{"0":42}}')
    assert store.marks([(1, 0)]) == {(1, 0): 41}
    store.client.close()


def test_a_redis_busy_longer_than_the_client_waits_is_one_sentence(server):
    endpoint = RedisEndpoint(server.url(1))
    client = endpoint.connect(retry=BusyRetry(wait_s=0.5))
    client.ping()
    with LongScript(server.url(), 20) as script:
        started = time.monotonic()
        with pytest.raises(RedisBusyError) as caught:
            client.set("k", "v")
        assert 0.4 < time.monotonic() - started < 5
        redis.Redis.from_url(server.url()).script_kill()
    assert isinstance(script.result, redis.ResponseError)  # killed, not finished
    said = endpoint.describe_error(caught.value)
    assert said.startswith(f"Redis at redis://127.0.0.1:{server.port}/1: it answered BUSY for ")
    assert "SCRIPT KILL" in said and "maxRecordsPerBatch" in said
    assert "\n" not in said
    assert client.get("k") is None  # the refused command never ran
    client.close()


def test_other_errors_are_not_sent_again(server):
    client = RedisEndpoint(server.url(1)).connect()
    client.set("s", "text")
    started = time.monotonic()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.hget("s", "f")
    assert time.monotonic() - started < 0.5
    client.close()


def test_a_server_that_is_gone_still_fails_at_once(server):
    client = RedisEndpoint(server.url(1)).connect()
    client.ping()
    server.crash()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert time.monotonic() - started < 1.0  # no retries with backoff on a refused connection
    client.close()


def test_a_sentinel_client_waits_out_busy_too():
    client = RedisEndpoint("redis+sentinel://127.0.0.1:1/primary/0").connect()
    assert isinstance(client.connection_pool.connection_kwargs["retry"], BusyRetry)
