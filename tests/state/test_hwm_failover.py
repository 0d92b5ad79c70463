"""The HWM store behind Sentinel: a commit counts once a replica holds it (Redis WAIT), so a
failover to a replica that was behind takes back no batch that counted as done.  Real
``redis-server`` primary and replica processes and ``redis-server --sentinel``."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqe.clients.redis_clients import kept_client
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.errors import ReplicaLagError, StateError
from sqe.ledger.hwm import HwmStore, Stage
from state.redis.tasks import stage_task, writer_task

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


def _staged(stage: str, rows: dict[str, str]) -> list[pa.RecordBatch]:
    """Rows of a HASH state ``events`` as a staging task gets them (``_stage``, ``_rf``: the
    key's length, ``:``, the key and the field; ``_rv``: the value)."""
    key = "events"
    return [pa.RecordBatch.from_pydict({
        "_stage": [stage] * len(rows),
        "_rf": [f"{len(key)}:{key}{field}" for field in rows],
        "_rv": [value.encode() for value in rows.values()]})]


def test_a_staging_task_counts_only_once_the_replica_holds_its_rows(replicated):
    """The failover between a batch's staging and its commit: the replica that is promoted
    must hold the staged rows, or the commit there counts the batch with nothing to apply and
    its rows are lost.  So a staging task waits for the replicas on the connection it staged
    through, and fails when they do not acknowledge; the re-run stages again."""
    store = _store(replicated.url)
    endpoint = RedisEndpoint(replicated.url)
    stage = store.stage_key(0, None, 0)
    task = stage_task("Redis state events", endpoint, replicas=1, timeout_s=1)
    [counts] = list(task(iter(_staged(stage, {"a": "1", "b": "2"}))))
    assert counts.to_pydict() == {"stage": [stage], "written": [2]}  # the replica holds them
    replicated.cut_replica()  # from here on nothing reaches it
    again = store.stage_key(1, None, 0)
    with pytest.raises(ReplicaLagError) as lag:
        list(task(iter(_staged(again, {"c": "3"}))))
    assert str(lag.value) == (
        "Redis state events (staged in the HWM store): 0 of the 1 replica(s) that must hold "
        "the batch's rows acknowledged them within 1 s, so the batch does not count (a "
        "failover now could lose them); the batch fails, and is written again when it is "
        "retried once the replicas catch up (INFO replication on the primary shows them)")
    # batch 0 is whole on both: committed on the primary, applied, and held by the replica
    replicated.resume_replica()
    replicated.wait_in_sync()
    assert store.commit(0, {(7, 0): 10}, [Stage(stage, "HASH")], offsets=OFFSETS[0]) is True
    with kept_client(endpoint) as client:
        assert client.hgetall("events") == {b"a": b"1", b"b": b"2"}
    store.client.close()


def _direct(rows: dict[str, str]) -> pa.RecordBatch:
    """Rows of the HASH state ``events`` as a direct write task gets them."""
    return pa.RecordBatch.from_pydict({"_rk": ["events"] * len(rows), "_rf": list(rows),
                                       "_rv": [value.encode() for value in rows.values()]})


def test_a_direct_write_counts_only_on_the_primary_it_began_with_once_the_replica_holds_it(
        replicated):
    """A Redis state written directly (a server of its own): each task ends once the replicas
    hold its writes, on the primary it began with.  A failover in the middle of a task, whose
    first rows went to a primary that died before the replica had them, fails the task (its
    later rows went to the promoted replica, and the wait there would pass)."""
    task = writer_task("events", RedisEndpoint(replicated.url), "HASH", 0, replicas=1,
                        timeout_s=1, ack="sqe:{t.In}:state:events:ack")
    [counts] = list(task(iter([_direct({"a": "1"})])))
    assert counts.to_pydict()["written"] == [1]
    replicated.cut_replica()

    def rows():
        yield _direct({"b": "2"})  # to the primary only
        replicated.kill_primary()
        replicated.resume_replica()
        replicated.wait_promoted()
        yield _direct({"c": "3"})  # to the promoted replica, which never got "b"

    with pytest.raises(StateError) as failed:
        list(task(rows()))
    where = RedisEndpoint(replicated.url).display
    assert str(failed.value) == (
        f"Redis state events at {where}: the Redis primary changed while the task wrote (a "
        "failover), so its first writes may be on a server that is gone; the batch fails, and "
        "is written again when it is retried")
