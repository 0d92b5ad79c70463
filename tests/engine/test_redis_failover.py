"""The chain with its HWM store and Redis state behind Sentinel, through a failover to a
replica that was behind: the commit the replica lacked never counted as done, so the rerun on
the promoted replica writes it again, and every event arrives once (real ``redis-server``
primary and replica, ``redis-server --sentinel``, broker, Postgres and Spark)."""

from __future__ import annotations

import pytest

from sqe.cli.sample_events import produce_events
from support.replicated_redis import ReplicatedRedis
from tests.engine.test_exactly_once import Chain, _assert_each_event_once

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.postgres]

EVENTS = 2000


class SentinelChain(Chain):
    """The chain, its load step's HWM store and Redis state behind the Sentinel at ``url``."""

    def __init__(self, url: str, *args) -> None:
        super().__init__(*args)
        self.url = url

    def command(self, name: str, checkpoint: str | None = None, *extra: str) -> list[str]:
        command = super().command(name, checkpoint, *extra)
        if name != "load":
            return command
        # service_conf's --conf pairs name the primary itself: left out (conf/local.yaml's
        # host and port stay, below the --conf URL that overrides them)
        ours = ("jw.sqe.state.redis.", "jw.sqe.spout.kafka.filterReplays.redis.")
        kept: list[str] = []
        for arg in command:
            if arg.startswith(ours) and kept[-1] == "--conf":
                kept.pop()
            else:
                kept.append(arg)
        return [*kept,
                "--conf", f"jw.sqe.spout.kafka.filterReplays.redis.url={self.url}",
                "--conf", f"jw.sqe.state.redis.url={self.url}",
                "--conf", "jw.sqe.spout.kafka.filterReplays.redis.replicaTimeout=2",
                "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=500"]


@pytest.mark.slow
def test_a_failover_to_a_replica_that_was_behind_loses_and_doubles_nothing(
        kafka_bootstrap, kafka_topic, postgres_dsn, tmp_path):
    replicated = ReplicatedRedis(tmp_path / "redis")
    try:
        events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
        chain = SentinelChain(replicated.url, tmp_path, kafka_bootstrap, events, enriched,
                              f"redis://127.0.0.1:{replicated.primary_port}/0", postgres_dsn)
        produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
        done = chain.run("enrich")
        assert done.returncode == 0, done.stderr[-3000:]
        # load stops before its commit of batch 1; the replica falls behind the primary there
        proc, marker = chain.start_with_fault("load", "before-commit@1", "resume")
        chain.wait(proc, "load", "before-commit@1")
        replicated.cut_replica()
        marker.unlink()
        assert proc.wait(300) == 1
        log = chain.log("load", "before-commit@1")
        assert ("batch 1 of load.Enriched is committed on the primary, but 0 of the 1 "
                "replica(s) that must hold it acknowledged it within 2 s") in log, log[-3000:]
        # the primary dies with batch 1; the Sentinel promotes the replica, which lacks it
        replicated.kill_primary()
        replicated.resume_replica()
        replicated.wait_promoted()
        replicated.restart_old_primary_as_replica()
        chain.redis_url = f"redis://127.0.0.1:{replicated.replica_port}/0"
        promoted = replicated.client(replicated.replica_port)
        assert promoted.get("sqe:{load.Enriched}:batch") == b"0"
        promoted.close()
        done = chain.run("load")
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_each_event_once(chain, {f"e{i}" for i in range(EVENTS)})
    finally:
        replicated.stop()
