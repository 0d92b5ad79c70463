"""A batch's HWM commit with its staged rows applied in the background (sqe.engine.batch.commit):
the commit returns once the rows are committed, the rows reach the state's keys meanwhile,
and the next batch's wait returns once they have.  Real Redis."""

from __future__ import annotations

import logging
import threading

import pytest
import redis

from sqe.engine.batch.commit import Applier, commit_hwm
from sqe.ledger.hwm import HwmStore, Stage
from state.sink import Batch

pytestmark = pytest.mark.redis


class _HeldStore(HwmStore):
    """The HWM store, its rows applied only once :attr:`go` is set (the test holds them)."""

    go: threading.Event
    applying: threading.Event

    def finish_applying(self, stages=None):  # type: ignore[no-untyped-def]
        self.applying.set()
        self.go.wait(30)
        super().finish_applying(stages)


@pytest.fixture
def store(redis_url):
    s = HwmStore.from_url(redis_url, "t.In", ttl_seconds=3600)
    s.__class__ = _HeldStore
    s.go, s.applying = threading.Event(), threading.Event()
    yield s
    s.go.set()
    s.client.close()


def _batch(store: HwmStore, batch_id: int, rows: dict[bytes, bytes]) -> Batch:
    key = store.stage_key(batch_id, "/ck", 0)
    store.client.hset(key, mapping=rows)
    return Batch("t.In", batch_id, store, '{"0": 1}', "/ck", stages=[Stage(key, "HASH")])


def test_the_committed_rows_are_applied_in_the_background_and_waited_for(store, redis_url):
    client = redis.Redis.from_url(redis_url)
    applier = Applier()
    commit_hwm(_batch(store, 0, {b"2:EUe1": b"100", b"2:EUe2": b"7"}), {(1, 0): 9}, applier)
    # committed: the marks and the batch are there, the rows are being applied
    assert store.load().batch_id == 0 and store.load().hwm == {(1, 0): 9}
    assert store.applying.wait(30)
    assert client.hgetall("EU") == {}
    waited = threading.Thread(target=applier.wait)
    waited.start()
    waited.join(0.3)
    assert waited.is_alive()  # the next batch waits for them
    store.go.set()
    waited.join(30)
    assert not waited.is_alive()
    assert client.hgetall("EU") == {b"e1": b"100", b"e2": b"7"}
    assert not client.exists("sqe:{t.In}:apply")  # nothing left to apply


def test_without_an_applier_the_commit_applies_the_rows_itself(store, redis_url):
    store.go.set()
    commit_hwm(_batch(store, 0, {b"2:EUe1": b"100"}), {(1, 0): 9})
    assert redis.Redis.from_url(redis_url).hgetall("EU") == {b"e1": b"100"}


def test_a_redis_error_in_the_background_is_a_warning_and_the_next_admission_applies_them(
        store, redis_url, caplog):
    store.go.set()
    applier = Applier()
    batch = _batch(store, 0, {b"2:EUe1": b"100"})
    broken = HwmStore.from_url("redis://127.0.0.1:1/0", "t.In", ttl_seconds=3600)
    try:
        with caplog.at_level(logging.WARNING, logger="sqe"):
            store.commit(0, {(1, 0): 9}, batch.stages, batch.offsets, batch.checkpoint,
                         apply=False)
            applier.start(broken, [s.key for s in batch.stages], batch)
            applier.wait()  # the failure is not raised: the rows are committed
    finally:
        broken.client.close()
    assert "batch 0 of t.In is committed; applying its staged rows failed" in caplog.text
    assert redis.Redis.from_url(redis_url).hgetall("EU") == {}
    assert store.admit(1, '{"0": 2}') is True  # applies what was left first
    assert redis.Redis.from_url(redis_url).hgetall("EU") == {b"e1": b"100"}


def test_any_other_failure_in_the_background_fails_the_next_batch(store):
    store.go.set()
    applier = Applier()
    batch = _batch(store, 0, {b"2:EUe1": b"100"})

    class Bug(Exception):
        pass

    class Broken:
        def finish_applying(self, stages):  # type: ignore[no-untyped-def]
            raise Bug("a bug")

    applier.start(Broken(), ["x"], batch)  # type: ignore[arg-type]
    with pytest.raises(Bug):
        applier.wait()
    applier.wait()  # said once
