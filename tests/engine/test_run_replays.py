"""SQE's own replay scenario, run end to end: real broker, real Redis, real Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqe.config.plan import plan_topology
from sqe.engine.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata, kafka_secondary_id, pid_for
from tests.support import DATA
from tests.support.kafka_io import cluster_id, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

UPSTREAM_PID = 4242
SEQUENCES = {0: [0, 1, 2, 1, 2, 3, 2, 3, 4], 1: [0, 1, 2, 1, 0, 1, 2, 1, 0],
             2: [0, 1, 2, 3, 4, 3, 2, 1, 0]}


def topology_file(tmp_path: Path, source: str, dest: str) -> Path:
    """SQE's replay test topology with this test's topic names."""
    text = (DATA / "sqe_kafka_replays.json").read_text()
    text = text.replace('"objectName": "source"', f'"objectName": "{source}"')
    text = text.replace('"objectName": "dest"', f'"objectName": "{dest}"')
    path = tmp_path / "replays.json"
    path.write_text(text)
    return path


def test_sqe_replay_scenario(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "source"), kafka_topic(1, "dest")
    keys = [StreamMetadata(UPSTREAM_PID, sp, off).to_bytes()
            for sp, seq in SEQUENCES.items() for off in seq]
    produce(kafka_bootstrap, source, [(k, k, 0) for k in keys])
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    plan = plan_topology(load_topology(topology_file(tmp_path, source, dest)), conf=conf)

    reports = run_topology(plan, spark, "replays", tmp_path / "ck", "once")

    # Expected: per source partition, the offsets above every earlier one, in order.
    expected = []
    for position, key in enumerate(keys):
        m = StreamMetadata.from_bytes(key)
        earlier = [StreamMetadata.from_bytes(k).offset for k in keys[:position]
                   if StreamMetadata.from_bytes(k).partition == m.partition]
        if all(m.offset > e for e in earlier):
            expected.append((position, key))
    assert len(expected) == 13
    pid = pid_for("replays", "Source",
                  kafka_secondary_id(cluster_id(kafka_bootstrap, source), [kafka_bootstrap], source))
    got = read_topic(kafka_bootstrap, dest)
    assert [(r.key, r.value) for r in got] == [
        (StreamMetadata(pid, 0, position).to_bytes(), key) for position, key in expected]
    assert sum(r.records_read for r in reports) == 27
    assert sum(r.replays_dropped for r in reports) == 14
    assert sum(r.written.get(dest, 0) for r in reports) == 13
