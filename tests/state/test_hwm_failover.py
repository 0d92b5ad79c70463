"""The HWM store behind Sentinel: a commit counts once a replica holds it (Redis WAIT), so a
failover to a replica that was behind takes back no batch that counted as done.  Real
``redis-server`` primary and replica processes and ``redis-server --sentinel``."""

from __future__ import annotations

import pytest

from sqe.config.redis_clients import kept_client
from sqe.config.redis_endpoint import RedisEndpoint
from sqe.errors import ReplicaLagError
from sqe.ledger.hwm import HwmStore

pytestmark = pytest.mark.redis

OFFSETS = ['{"0": 10}', '{"0": 20}']


def _store(url: str, replicas: int = 1) -> HwmStore:
    return HwmStore.from_url(RedisEndpoint(url), "t.Events", 3600, replicas=replicas,
                             replica_timeout=1)


def test_a_commit_the_replica_lacks_does_not_count_and_a_failover_takes_back_nothing(
        replicated):
    store = _store(replicated.url)
    assert store.commit(0, {(7, 0): 10}, offsets=OFFSETS[0]) is True  # the replica holds it
    replicated.cut_replica()  # behind from here on: batch 1 never reaches it
    with pytest.raises(ReplicaLagError) as lag:
        store.commit(1, {(7, 0): 20}, offsets=OFFSETS[1])
    assert str(lag.value) == (
        f"HWM store at {store.url}: batch 1 of t.Events is committed on the primary, but 0 of "
        "the 1 replica(s) that must hold it acknowledged it within 1 s, so it does not count "
        "as done (a failover now could lose it); the run stops, and its next run finishes the "
        "batch without writing it twice once the replicas catch up (INFO replication on the "
        "primary shows them)")
    # Spark re-runs the batch: the primary has it, but it still does not count
    with pytest.raises(ReplicaLagError):
        store.admit(1, OFFSETS[1])
    store.client.close()
    # the primary dies before the replica got batch 1; the replica is promoted
    replicated.kill_primary()
    replicated.resume_replica()
    replicated.wait_promoted()
    replicated.restart_old_primary_as_replica()
    again = _store(replicated.url)
    commit = again.last_commit()
    assert commit is not None and commit.batch_id == 0  # batch 1 was never done: re-run it
    assert again.admit(1, OFFSETS[1]) is True
    assert again.commit(1, {(7, 0): 20}, offsets=OFFSETS[1]) is True
    assert again.marks([(7, 0)]) == {(7, 0): 20}
    again.client.close()


def test_a_rerun_of_a_committed_batch_waits_for_the_replica_too(replicated):
    store = _store(replicated.url)
    replicated.pause_replica()
    with pytest.raises(ReplicaLagError):
        store.commit(0, {(7, 0): 10}, offsets=OFFSETS[0])
    replicated.resume_replica()  # it catches up: the re-run finds the batch done and held
    assert store.admit(0, OFFSETS[0]) is False
    assert store.commit(0, {(7, 0): 10}, offsets=OFFSETS[0]) is False
    store.client.close()


def test_without_replicas_to_wait_for_a_commit_does_not_wait(replicated):
    replicated.pause_replica()
    store = _store(replicated.url, replicas=0)
    assert store.commit(0, {(7, 0): 10}, offsets=OFFSETS[0]) is True
    store.client.close()


def test_a_client_a_worker_keeps_follows_the_sentinel_to_the_new_primary(replicated):
    endpoint = RedisEndpoint(replicated.url)
    with kept_client(endpoint) as client:
        client.set("k", "v")
        assert client.execute_command("ROLE")[0] == b"master"
    replicated.switch_over()  # the old primary keeps running, as a replica now
    with kept_client(endpoint) as again:  # a later task of the same worker
        assert again is client
        assert again.config_get("port")["port"] == str(replicated.replica_port)
        assert again.execute_command("ROLE")[0] == b"master"
        again.set("k", "w")  # a replica would refuse it
        assert again.get("k") == b"w"
