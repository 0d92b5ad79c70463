"""Redis states behind Sentinel: a batch's writes count once a replica holds them (Redis WAIT
after the writes), so a failover to a replica that was behind takes back no batch that counted
as done, and the batch run again merges nothing twice.  Real ``redis-server`` primary and
replica processes, ``redis-server --sentinel`` and a local Spark."""

from __future__ import annotations

import json

import pytest
import redis

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.config.settings import Settings
from sqe.config.views import StateSettings
from sqe.errors import ReplicaLagError
from state.redis.aggregates import AggregateSink
from state.redis.sink import RedisSink
from state.sink import Batch, SinkTarget

pytestmark = [pytest.mark.redis, pytest.mark.spark]


def _target(url: str, aggregates: dict[str, str], **options) -> SinkTarget:
    settings = {"jw.sqe.state.redis.url": url, "jw.sqe.state.redis.keyname.fields": ["day"],
                "jw.sqe.state.redis.replicaTimeout": 1, **options}
    fields = ("day", "total") if aggregates else ("day", "amount")
    return SinkTarget("Totals", fields, StateSettings(Settings.defaults().overlay(settings, "t")),
                      aggregates, "TRANSACTIONAL" if aggregates else None,
                      "t.yaml: command 2 (Query)")


def _run(sink, spark, batch_id: int, amount: int) -> None:
    """One batch through the sink as the engine drives it: open, write, commit."""
    sink.open(Batch("t.Events", batch_id))
    frame = spark.createDataFrame([("d1", amount)], "day string, amount long")
    if sink.merges:
        frame = frame.groupBy("day").sum("amount").withColumnRenamed("sum(amount)", "total")
    sink.write(frame)
    sink.commit()


def _total(url: str) -> int:
    raw = RedisEndpoint(url).connect().get("Totals:d1:total")
    return json.loads(raw)[2]


def test_an_aggregate_batch_the_replica_lacks_does_not_count_and_runs_again_once(
        spark, replicated):
    sink = AggregateSink(_target(replicated.url, {"total": "sum"}))
    _run(sink, spark, 0, 5)  # the replica holds it
    replicated.cut_replica()  # behind from here on: batch 1 never reaches it
    with pytest.raises(ReplicaLagError) as lag:
        _run(sink, spark, 1, 7)
    assert str(lag.value) == (
        f"Redis state Totals at {replicated.url}: batch 1 of t.Events is committed on the "
        "primary, but 0 of the 1 replica(s) that must hold it acknowledged it within 1 s, so "
        "it does not count as done (a failover now could lose it); the run stops, and its "
        "next run finishes the batch without writing it twice once the replicas catch up "
        "(INFO replication on the primary shows them)")
    assert _total(replicated.url) == 12  # on the primary
    # the primary dies before the replica got batch 1; the replica is promoted
    replicated.kill_primary()
    replicated.resume_replica()
    replicated.wait_promoted()
    replicated.restart_old_primary_as_replica()
    assert _total(replicated.url) == 5  # batch 1 never counted: Spark runs it again
    assert sink.committed("t.Events").batch_id == 0
    _run(sink, spark, 1, 7)
    _run(sink, spark, 1, 7)  # and once more (a re-run after the commit): merged once
    assert _total(replicated.url) == 12


def test_rows_written_directly_wait_for_the_replica_unless_told_not_to(spark, replicated):
    """Each write task waits for the replica on the primary it wrote to (a Spark task's error,
    which the run says as its sentence), before the batch's own wait at its commit."""
    replicated.pause_replica()
    with pytest.raises(Exception) as lag:  # Spark's wrapper of the task's error
        _run(RedisSink(_target(replicated.url, {})), spark, 0, 5)
    assert (f"sqe.errors.ReplicaLagError: Redis state Totals at "
            f"{RedisEndpoint(replicated.url).display}: 0 of the 1 replica(s) that must hold the "
            "batch's rows acknowledged them within 1 s") in str(lag.value)
    _run(RedisSink(_target(replicated.url, {}, **{"jw.sqe.state.redis.replicas": 0})),
         spark, 1, 5)
    replicated.resume_replica()
    assert redis.Redis(port=replicated.primary_port).get("d1") == b"5"


def test_the_replicas_a_state_waits_for_by_default():
    def replicas(url: str, **options) -> int:
        return _target(url, {}, **options).settings.redis.replicas

    assert replicas("redis+sentinel://127.0.0.1:26379/mymaster/0") == 1
    assert replicas("redis://127.0.0.1:6379/0") == 0
    assert replicas("redis://127.0.0.1:6379/0", **{"jw.sqe.state.redis.replicas": 2}) == 2
    assert replicas("redis+sentinel://127.0.0.1:26379/mymaster/0",
                    **{"jw.sqe.state.redis.replicas": 0}) == 0
