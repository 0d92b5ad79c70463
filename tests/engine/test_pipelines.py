"""The README's chain as a Spark Declarative Pipeline (examples/pipeline): SQE's source in its
flows and the ``sqe-hop`` sink as its sinks, run by ``sqe pipelines run`` (spark-pipelines with
the fix its client needs), killed mid-batch and before a commit, and run again: every event
once in Redis; with the port spark-pipelines binds by default (15002) taken, as another
pipeline on the host takes it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from sqe.cli.local_services import service_conf
from sqe.cli.sample_events import produce_events
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from tests.support import ROOT
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

EVENTS = 1000


def _spec(tmp: Path, kafka: str, events: str, enriched: str, redis_url: str) -> Path:
    """examples/pipeline, with its configuration pointed at these services and topics (its
    storage as it is: ``pipeline-storage`` beside the spec)."""
    shutil.copytree(ROOT / "examples/pipeline", tmp / "pipeline")
    spec = tmp / "pipeline" / "spark-pipeline.yml"
    doc = yaml.safe_load(spec.read_text())
    pairs = service_conf(kafka, redis_url)[1::2]  # the --conf values: KEY=VALUE
    assert doc["storage"] == "pipeline-storage"  # beside the spec: as the example ships it
    doc["configuration"].update({
        "sqe.chain.config": str(ROOT / "conf/local.yaml"), "sqe.chain.events": events,
        "sqe.chain.enriched": enriched,
        **{f"spark.{k}": v for k, _, v in (p.partition("=") for p in pairs)}})
    spec.write_text(yaml.safe_dump(doc))
    return spec


def _command(spec: Path) -> list[str]:
    return [sys.executable, "-m", "sqe.cli.main", "pipelines", "run", "--spec", str(spec)]


def _run(spec: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_command(spec), capture_output=True, text=True, timeout=600,
                          cwd=spec.parent)


def _crash(spec: Path, fault: str) -> None:
    marker, log = spec.parent / "fault.marker", spec.parent / f"{fault}.log"
    proc = start_with_fault(_command(spec), fault, marker, log)
    try:
        wait_for_fault(proc, marker, log)
        time.sleep(1.0)  # let the other task reach the point too
    finally:
        kill_group(proc)


@contextmanager
def _port_taken(port: int = 15002) -> Iterator[None]:
    """A socket bound to ``port`` on every interface, as another pipeline's server binds it.
    When something else holds the port already, that does as well."""
    with socket.socket() as held:
        try:
            held.bind(("", port))
            held.listen()
        except OSError as e:
            print(f"port {port} is held already: {e}")
        yield


def _loaded(url: str) -> tuple[Counter, list[bytes]]:
    client = redis.Redis.from_url(url)
    try:
        log = Counter(v.decode() for v in client.hvals("load_log"))
        regions = [e for k in client.keys("*") if not k.startswith(b"sqe:")
                   and k != b"load_log" for e in client.hkeys(k)]
        return log, regions
    finally:
        client.close()


def test_the_chain_as_a_declarative_pipeline_is_exactly_once_through_kills(
        kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    with _port_taken():  # each run's Spark Connect server takes a free port
        _the_chain_through_kills(kafka_bootstrap, kafka_topic, redis_url, tmp_path)


def _the_chain_through_kills(kafka_bootstrap, kafka_topic, redis_url, tmp_path) -> None:
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
    spec = _spec(tmp_path, kafka_bootstrap, events, enriched, redis_url)
    expected = {f"e{i}" for i in range(EVENTS)}

    _crash(spec, "kafka-state-sent@400")  # enrich's flow dies mid-batch
    written = len(read_topic(kafka_bootstrap, enriched))
    assert 400 <= written < EVENTS
    _crash(spec, "before-commit")  # then a flow dies before its commit
    for _ in range(3):  # a run reads what was there when it started: load may need another
        done = _run(spec)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "Run is COMPLETED" in done.stdout + done.stderr
        assert "CANNOT_MODIFY_STATIC_CONFIG" not in done.stderr  # its own port, said nowhere
        if sum(_loaded(redis_url)[0].values()) >= EVENTS:
            break
    assert any((spec.parent / "pipeline-storage").rglob("offsets"))  # the flows' checkpoints
    records = read_topic(kafka_bootstrap, enriched)
    assert len(records) > EVENTS  # enrich's batch was written again: replays
    log, regions = _loaded(redis_url)
    assert set(log) == expected and all(n == 1 for n in log.values()), (
        f"{sum(log.values())} loaded, duplicated: {[e for e, n in log.items() if n > 1][:5]}")
    assert sorted(e.decode() for e in regions) == sorted(expected)
    assert redis.Redis.from_url(redis_url).keys("sqe:*:stage:*") == []
