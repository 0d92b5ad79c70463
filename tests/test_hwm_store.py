"""The Redis HWM store against a real Redis: fencing, max-merge, TTL, int64 precision."""

from __future__ import annotations

import time

import pytest
import redis

from state.hwm import HwmStore, StaleBatchError


@pytest.fixture
def store(redis_url):
    s = HwmStore.from_url(redis_url, "load/Enriched", ttl_seconds=3600)
    yield s
    s.client.close()


def test_empty_store(store):
    snap = store.load()
    assert snap.batch_id is None and snap.hwm == {}


def test_commit_merges_with_max_and_records_the_batch(store):
    assert store.commit(0, {(1, 0): 10, (1, 1): 5}) is True
    assert store.commit(1, {(1, 0): 7, (2, 0): 3}) is True  # 7 < 10: the mark stays
    snap = store.load()
    assert snap.batch_id == 1
    assert snap.hwm == {(1, 0): 10, (1, 1): 5, (2, 0): 3}


def test_a_committed_batch_is_skipped_and_an_older_one_fenced(store):
    store.commit(5, {(1, 0): 10})
    assert store.commit(5, {(1, 0): 99}) is False  # Spark re-ran batch 5
    with pytest.raises(StaleBatchError, match="batch 4 is older than the committed batch 5"):
        store.commit(4, {(1, 0): 50})
    assert store.load().hwm == {(1, 0): 10}  # the refused writer changed nothing


def test_int64_offsets_keep_full_precision(store):
    big = 2**63 - 2
    store.commit(0, {(-(2**63), -1): big - 1, (0, 0): -(2**62)})
    store.commit(1, {(-(2**63), -1): big, (0, 0): -(2**62) - 1})
    assert store.load().hwm == {(-(2**63), -1): big, (0, 0): -(2**62)}
    store.commit(2, {(-(2**63), -1): big - 1})  # differs from big only past 2**53
    assert store.load().hwm[(-(2**63), -1)] == big


def test_keys_share_one_cluster_slot_and_consumers_are_isolated(store, redis_url):
    tags = {k.split("{")[1].split("}")[0] for k in store.keys}
    assert tags == {"load/Enriched"}
    other = HwmStore.from_url(redis_url, "other/Stream", ttl_seconds=3600)
    store.commit(3, {(1, 0): 1})
    assert other.load().batch_id is None
    other.client.close()


def test_entries_older_than_the_ttl_expire(redis_url):
    store = HwmStore.from_url(redis_url, "ttl/Stream", ttl_seconds=1)
    store.commit(0, {(1, 0): 10})
    assert store.load().hwm == {(1, 0): 10}
    time.sleep(2.1)
    assert store.load().hwm == {}  # expired entries are not served
    store.commit(1, {(2, 0): 1})  # and a commit deletes them
    assert redis.Redis.from_url(redis_url).hkeys(store.keys[0]) == [b"2:0"]
    store.client.close()


def test_bad_arguments():
    client = redis.Redis()
    with pytest.raises(ValueError, match="at least 1 second"):
        HwmStore(client, "c", 0)
    with pytest.raises(ValueError, match="non-empty consumer"):
        HwmStore(client, "", 10)


def test_cli_shows_and_resets_a_consumer(redis_url, capsys):
    from sqe.cli import main

    store = HwmStore.from_url(redis_url, "cli.S", 3600)
    store.commit(3, {(5, 1): 42})
    assert main(["hwm", "show", "cli.S", "--redis", redis_url]) == 0
    out = capsys.readouterr().out
    assert "committed batch 3, 1 high-water mark(s)" in out and "pid=5 partition=1 offset=42" in out
    assert main(["hwm", "reset", "cli.S", "--redis", redis_url]) == 0
    assert store.load().batch_id is None and store.load().hwm == {}
