"""A blip heals inside the run: a batch's HWM commit whose connection drops is sent again.

A real Redis behind the tests' own TCP proxy (:mod:`support.fault_proxy`): the reply to
the commit script is lost after Redis ran it, or every connection is cut, or nothing passes
for a while.  The commit is idempotent by batch id, so sending it again commits the batch
once, its staged rows applied once; a store away longer than the retry time fails the batch
in one sentence.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import pytest
import redis

from sqe.cli.local_services import free_port
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.config.settings import Settings
from sqe.config.views import StateSettings
from sqe.engine.batch.commit import commit_hwm
from sqe.errors import StateError
from sqe.ledger.hwm import HwmStore, Stage
from sqe.ledger.hwm_lua import COMMIT
from sqe.ledger.retry import Failed, Unreachable, asked, retried, times_tried
from state.redis.sink import RedisSink
from state.sink import Batch, SinkTarget
from support.fault_proxy import FaultProxy

pytestmark = pytest.mark.redis

OFFSETS = '{"0": 10}'


@pytest.fixture
def proxied(redis_url):
    """The test's Redis database through a fault proxy: (proxy, URL through it, direct)."""
    parts = urlsplit(redis_url)
    proxy = FaultProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    database = parts.path.lstrip("/") or "0"
    try:
        yield proxy, f"redis://127.0.0.1:{proxy.port}/{database}", redis.Redis.from_url(redis_url)
    finally:
        proxy.stop()


def _batch(url: str, retry_s: float, staged: dict[bytes, bytes] | None = None) -> Batch:
    store = HwmStore.from_url(RedisEndpoint(url), "t.In", 3600, commit_retry_s=retry_s)
    batch = Batch("t.In", 0, store, OFFSETS, "/ck/In")
    if staged is not None:
        key = batch.stage_key()
        store.client.hset(key, mapping=staged)
        batch.stages.append(Stage(key, "HASH"))
    return batch


def _sha(direct: redis.Redis) -> bytes:
    """The commit script's sha, the script loaded in the server: its EVALSHA then runs it
    (in a server that never ran it, the first EVALSHA fails with NOSCRIPT, and the reply the
    proxy would lose is that one's)."""
    return direct.script_load(COMMIT).encode()


def test_a_commit_whose_reply_is_lost_is_sent_again_and_counts_once(proxied, caplog):
    proxy, url, direct = proxied
    batch = _batch(url, retry_s=10, staged={b"6:eventsa": b"1", b"6:eventsb": b"2"})
    proxy.lose_reply_to(_sha(direct))  # Redis runs the commit; its answer never arrives
    with caplog.at_level(logging.WARNING, logger="sqe"):
        commit_hwm(batch, {(7, 0): 10})
    assert proxy.replies_lost == 1
    assert direct.get("sqe:{t.In}:batch") == b"0"
    assert direct.hgetall("events") == {b"a": b"1", b"b": b"2"}  # applied now, once
    assert not direct.exists("sqe:{t.In}:apply")
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("batch 0 of t.In: the HWM store's connection failed at the commit "
                            "(") and m.endswith("); sending the commit again on a new "
                                                "connection") for m in said), said
    assert "batch 0 of t.In: committed after 1 failed attempt(s)" in said
    batch.store.client.close()  # type: ignore[union-attr]


def test_every_connection_cut_and_a_short_blackhole_heal_inside_the_retry_time(proxied):
    proxy, url, direct = proxied
    batch = _batch(url, retry_s=10)
    batch.store.client.ping()  # type: ignore[union-attr]  # a connection to cut
    proxy.cut()
    proxy.blackhole(1.0)
    commit_hwm(batch, {(7, 0): 10})
    assert direct.get("sqe:{t.In}:batch") == b"0"
    assert direct.hget("sqe:{t.In}:hwm", "7:0") == b"10"
    batch.store.client.close()  # type: ignore[union-attr]


def test_a_store_away_longer_than_the_retry_time_fails_the_batch_in_one_sentence(proxied):
    proxy, url, direct = proxied
    batch = _batch(url, retry_s=0)  # 0: no second attempt
    proxy.lose_reply_to(_sha(direct))
    with pytest.raises(StateError) as failed:
        commit_hwm(batch, {(7, 0): 10})
    text = str(failed.value)
    assert text.startswith("cannot commit the HWMs of t.In: ") and "\n" not in text
    assert text.endswith("; the batch is re-run and its output filtered as replays")
    # it did run: the re-run of the batch finds it committed and writes nothing twice
    assert direct.get("sqe:{t.In}:batch") == b"0"
    again = HwmStore.from_url(RedisEndpoint(url), "t.In", 3600)
    assert again.admit(0, OFFSETS) is False
    again.client.close()
    batch.store.client.close()  # type: ignore[union-attr]


def test_a_request_at_the_start_whose_reply_is_lost_is_sent_again(proxied, caplog):
    # what a run asks its HWM store before its first batch (its last commit, rows left to
    # apply) goes through the same retry as the commit
    proxy, url, direct = proxied
    direct.set("sqe:{t.In}:probe", b"here")
    client = redis.Redis.from_url(url)
    proxy.lose_reply_to(b"sqe:{t.In}:probe")
    with caplog.at_level(logging.WARNING, logger="sqe"):
        value, tries = retried(lambda: client.get("sqe:{t.In}:probe"), 10, "consumer t.In",
                               "the request", str)
    assert (value, tries, proxy.replies_lost) == (b"here", 1, 1)
    assert any(r.getMessage().startswith("consumer t.In: the HWM store's connection failed at "
                                         "the request (") for r in caplog.records)
    proxy.blackhole(3.0)
    with pytest.raises(Unreachable) as away:
        retried(lambda: redis.Redis.from_url(url, socket_timeout=0.5).get("x"), 1.0,
                "consumer t.In", "the request", str)
    assert away.value.tries >= 1 and isinstance(away.value.error, redis.TimeoutError)
    client.close()
    direct.delete("sqe:{t.In}:probe")


def test_the_hop_sinks_calls_to_the_hwm_store_are_sent_again_and_fail_in_one_sentence(
        proxied, caplog):
    """The sqe-hop sink's write tasks ask the HWM store for its last commit, and its commit
    for the batch's admission: a reply lost there (the nemesis met it after a failover) is
    sent again on a new connection, as every other call to the store is, and a store away
    longer than the retry time is one sentence, not redis-py's ConnectionError."""
    import inspect

    from sqe.engine.batch import hop_sink
    from sqe.errors import SourceError
    from sqe.ledger.hwm_lua import LAST

    proxy, url, direct = proxied
    store = HwmStore.from_url(RedisEndpoint(url), "t.In", 3600, commit_retry_s=10)
    proxy.lose_reply_to(direct.script_load(LAST).encode())
    with caplog.at_level(logging.WARNING, logger="sqe"):
        done = hop_sink._asked(store, store.last_commit, "t.In", 3,
                               "the request for its last commit")
    assert done is None and proxy.replies_lost == 1
    assert any(r.getMessage().startswith("batch 3 of t.In: the HWM store's connection failed "
                                         "at the request for its last commit (")
               for r in caplog.records)
    source = inspect.getsource(hop_sink)  # no call of the sink's goes around it
    assert "store.last_commit()" not in source and "store.admit(" not in source
    store.client.close()
    gone = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: every connection refused
    away = HwmStore.from_url(RedisEndpoint(gone), "t.In", 3600, commit_retry_s=1.0)
    with pytest.raises(SourceError, match=r"^cannot read the HWM store of t\.In: .*\(tried "
                       r"\d+ times within jw\.sqe\.spout\.kafka\.filterReplays\.redis\."
                       r"commitRetrySeconds\)$"):
        hop_sink._asked(away, away.last_commit, "t.In", 3, "the request for its last commit")
    away.client.close()


def test_a_call_to_the_hwm_store_fails_in_the_stores_own_words(proxied):
    # asked() is how every call to the HWM store is made: blips sent again for the store's
    # retry time, and any failure one Failed whose text is the store's description of it
    proxy, url, direct = proxied
    store = HwmStore.from_url(RedisEndpoint(url), "t.In", 3600, commit_retry_s=1.0)
    direct.set("sqe:{t.In}:probe", b"here")
    proxy.lose_reply_to(b"sqe:{t.In}:probe")
    assert asked(store, lambda: store.client.get("sqe:{t.In}:probe"), "consumer t.In",
                 "the request") == (b"here", 1)
    with pytest.raises(Failed) as refused:  # not a blip: not sent again
        asked(store, lambda: store.client.hget("sqe:{t.In}:probe", "x"), "consumer t.In",
              "the request")
    assert refused.value.tries == 1 and "WRONGTYPE" in str(refused.value)
    assert isinstance(refused.value.error, redis.ResponseError)
    proxy.blackhole(3.0)
    with pytest.raises(Failed) as away:
        asked(store, lambda: redis.Redis.from_url(url, socket_timeout=0.5).get("x"),
              "consumer t.In", "the request")
    assert away.value.tries >= 1 and isinstance(away.value.error, redis.TimeoutError)
    assert str(away.value) == store.describe_error(away.value.error)
    store.client.close()
    direct.delete("sqe:{t.In}:probe")


def test_a_redis_state_whose_stage_clearing_loses_its_reply_still_opens_the_batch(proxied,
                                                                                   caplog):
    # A Redis state in the HWM store's database clears what a crashed attempt staged when the
    # batch opens; a failover there ended a run in the nemesis (seed 3): now it is sent again.
    proxy, url, direct = proxied
    batch = _batch(url, 10)
    settings = {"jw.sqe.state.redis.url": url, "jw.sqe.state.redis.keyname.fields": ["day"]}
    sink = RedisSink(SinkTarget("Totals", ("day", "amount"), StateSettings(
        Settings.defaults().overlay(settings, "t")), {}, None, "t.yaml: command 2 (Query)"))
    assert batch.store is not None
    stage = batch.store.stage_key(batch.batch_id, batch.checkpoint, 0)
    direct.hset(stage, "d1", "5")  # what a crashed attempt staged
    proxy.lose_reply_to(stage.encode())
    with caplog.at_level(logging.WARNING, logger="sqe"):
        sink.open(batch)
    assert proxy.replies_lost == 1 and direct.exists(stage) == 0
    assert any("at the clearing of Totals's stage" in r.getMessage() for r in caplog.records)


def test_a_run_s_question_whether_a_state_shares_the_store_is_sent_again(proxied, caplog):
    # At a run's start the one pass asks whether a Redis state lives in the HWM store's
    # database (INFO of both); a failover there ended a run in a traceback (nemesis seed 11).
    proxy, url, _ = proxied
    store = _batch(url, 10).store
    assert store is not None
    proxy.lose_reply_to(b"INFO")
    with caplog.at_level(logging.WARNING, logger="sqe"):
        assert store.same_database(url)
    assert proxy.replies_lost == 1
    assert any("at the comparison of its server with" in r.getMessage() for r in caplog.records)
    impatient = _batch(url, 0).store  # no time to send it again: one sentence
    assert impatient is not None
    proxy.lose_reply_to(b"INFO")
    with pytest.raises(StateError) as lost:
        impatient.same_database(url)
    assert "consumer t.In: cannot tell whether" in str(lost.value)
    assert "Connection closed by server" in str(lost.value)


def test_a_failure_says_how_often_its_call_was_sent():
    # one wording for the HWM store's commit, its requests and a Postgres state
    assert times_tried(1) == ""
    assert times_tried(3) == (" (tried 3 times within "
                              "jw.sqe.spout.kafka.filterReplays.redis.commitRetrySeconds)")
    assert times_tried(2, "jw.sqe.state.postgres.commitRetrySeconds") == (
        " (tried 2 times within jw.sqe.state.postgres.commitRetrySeconds)")
