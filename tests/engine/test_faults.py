"""Failure behaviour under faults, with real processes: a Kafka broker, a Redis and a Postgres
server stopped and restarted while topologies run, and the exact contents afterwards.

What a data engineer gets:

* **Kafka away for less than** ``jw.sqe.spout.kafka.readTimeoutSeconds``: the query waits
  (the planner asks the brokers again every second, a Kafka state's producer holds its
  records, librdkafka reconnects by itself) and goes on once the broker is back; nothing is
  lost, and whatever a producer wrote twice is dropped downstream as a replay.
* **Kafka away for longer**: ``sqe run`` exits 1 with one sentence naming the brokers,
  the topic and the option; a re-run once the broker is back completes exactly.
* **Redis with AOF** (``appendfsync always``): HWMs and the committed batch id survive a
  SIGKILL of the server; upstream replays after the restart are dropped.  **Without
  persistence** the marks are gone after a restart and replays pass the filter: a durable
  sink (Postgres) then holds them twice.  That is why ``sqe run`` warns about such a store.
* **Postgres stopped inside a state's commit** (rows and batch id sent, COMMIT not yet):
  the batch fails with one sentence, nothing of it is in the table, and the re-run after
  the server is back loads every row once, with the batch table at the last batch id.

The Kafka broker, the AOF Redis and the Postgres cluster here are private to their test
(started and stopped by PID); the other services are the session's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.cli.local_services import LocalService, free_port, service_conf, start_local_kafka
from sqe.cli.sample_events import produce_events
from sqe.config.plan import plan_topology
from sqe.config.settings import load_config
from sqe.engine.run.runner import run_topology
from sqe.errors import StoreBehind
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from sqe.lang.topology import load_topology
from sqe.observe.batch_report import BatchReport
from sqe.wire.keys import StreamMetadata
from support.fault_services import (
    PrivatePostgres,
    RestartableRedis,
    forget_producers,
    private_postgres_unavailable,
)
from tests.engine.test_exactly_once import load_commands
from tests.support import ROOT
from tests.support.kafka_io import produce, read_topic

LOCAL_CONF = ROOT / "conf/local.yaml"
PID = 4242  # the pid of the (pretended) upstream topology in pre-stamped `enriched` records
CONSUMER = "load.Enriched"

# -- topologies and records --------------------------------------------------------------------
def _write(path: Path, commands: list[dict]) -> Path:
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return path


def _chain(tmp: Path, events: str, enriched: str) -> Path:
    """enrich.yaml and load.yaml as one topology: two streams, one `sqe run` process."""
    enrich = yaml.safe_load((ROOT / "topologies/enrich.yaml").read_text())
    enrich[0]["CreateStream"]["objectName"] = events
    enrich[1]["Query"]["insertInto"]["objectName"] = enriched
    return _write(tmp / "chain.yaml", enrich + load_commands(enriched))


def _stamped(ids: range) -> list[tuple[bytes, bytes, int]]:
    """Records as enrich writes them: event ``i`` from source partition ``i % 2`` at offset
    ``i // 2``, keyed by its StreamMetadata.  Producing some of them again makes replays."""
    return [(StreamMetadata(PID, i % 2, i // 2).to_bytes(),
             json.dumps({"event_id": f"e{i}", "region": ["EU", "US"][i % 2],
                         "amount_cents": i * 100}).encode(), i % 2) for i in ids]


def _events(ids: range) -> set[str]:
    return {f"e{i}" for i in ids}


# -- running ------------------------------------------------------------------------------------
def _conf(kafka: str, redis_url: str, dsn: str | None = None, **extra: object) -> dict:
    args = service_conf(kafka, redis_url, dsn)
    return {**dict(pair.split("=", 1) for pair in args[1::2]), **extra}


def _command(path: Path, checkpoint: Path, kafka: str, redis_url: str, dsn: str | None = None,
             *extra: str) -> list[str]:
    return [sys.executable, "-m", "sqe.cli.main", "run", str(path), "--checkpoint", str(checkpoint),
            "--config", str(LOCAL_CONF), *service_conf(kafka, redis_url, dsn), *extra]


def _run_once(spark: object, path: Path, conf: dict, checkpoint: Path,
              accept_lost_marks: int | None = None) -> list[BatchReport]:
    """What `sqe run PATH --once` does, in this process's Spark session."""
    topology = load_topology(path)
    plan = plan_topology(topology, [load_config(LOCAL_CONF)], conf)
    return run_topology(plan, spark, topology.name, checkpoint, "once",
                        accept_lost_marks=accept_lost_marks)


def _wait_until(what: str, condition: Callable[[], bool], proc: subprocess.Popen, log: Path,
                timeout: float = 420.0, marker: Path | None = None) -> None:
    """Wait for ``condition`` while `sqe run` runs.  With ``marker``, a fault point reached
    again (by a task in a Python worker that had not fired yet) is let go at once."""
    deadline = time.monotonic() + timeout
    while not condition():
        if marker is not None:
            marker.unlink(missing_ok=True)
        if proc.poll() is not None:
            tail = "\n".join(line for line in log.read_text().splitlines()
                             if "rdkafka" not in line)[-3000:]
            raise AssertionError(f"sqe run ended (exit {proc.returncode}) before {what}:\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s; see {log}")
        time.sleep(0.5)


def _errors(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("error:")]


# -- what the stores hold -----------------------------------------------------------------------
def _redis_contents(url: str) -> dict[str, object]:
    """Every key of the database with its value (hashes and sorted sets as dicts), by name."""
    client = redis.Redis.from_url(url)
    try:
        out: dict[str, object] = {}
        for key in sorted(client.keys("*")):
            kind = client.type(key)
            out[key.decode()] = (client.hgetall(key) if kind == b"hash"
                                 else dict(client.zrange(key, 0, -1, withscores=True))
                                 if kind == b"zset" else client.get(key))
        return out
    finally:
        client.close()


def _load_log_count(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.hlen("load_log"))
    finally:
        client.close()


def _assert_loaded_once(url: str, expected: set[str]) -> None:
    """load.yaml's Redis states hold every expected event exactly once, and no stage is left."""
    contents = _redis_contents(url)
    log = Counter(v.decode() for v in contents.get("load_log", {}).values())
    assert set(log) == expected and sum(log.values()) == len(expected), (
        f"load_log: {sum(log.values())} fields for {len(expected)} events; twice: "
        f"{sorted(e for e, n in log.items() if n > 1)[:5]}, missing: "
        f"{sorted(expected - set(log))[:5]}")
    in_regions = Counter(field.decode() for key, value in contents.items()
                         if not key.startswith("sqe:") and key != "load_log"
                         for field in value)
    assert set(in_regions) == expected and sum(in_regions.values()) == len(expected)
    assert [k for k in contents if ":stage:" in k] == []


def _hwm_state(url: str) -> dict[str, object]:
    """The HWM store of load.Enriched: marks, their update times and the batch id."""
    contents = _redis_contents(url)
    return {k: v for k, v in contents.items() if k.startswith(f"sqe:{{{CONSUMER}}}:")}


def _postgres(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        return conn.execute(query).fetchall()


# -- 1. Kafka broker stopped and restarted ------------------------------------------------------
class _KafkaChain:
    """A private broker (restartable on its port and data dir), topics `events` (one
    partition: enrich runs one task, and its pause leaves the other core to load) and
    `enriched` (two), the chain topology, and `sqe run` of it paused in enrich's Kafka write."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        self.tmp, self.redis_url = tmp, redis_url
        self.port = free_port()
        self.broker: LocalService = start_local_kafka(tmp / "kafka", self.port)
        admin = AdminClient({"bootstrap.servers": self.kafka, "log_level": 2})
        for topic, partitions in (("events", 1), ("enriched", 2)):
            admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})]
                                )[topic].result(30)
        self.path = _chain(tmp, "events", "enriched")
        self.marker, self.log = tmp / "enrich.marker", tmp / "run.log"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> _KafkaChain:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc)
        self.broker.stop()

    @property
    def kafka(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restart_broker(self) -> None:
        self.broker = start_local_kafka(self.tmp / "kafka", self.port)  # same data, same port

    def start_paused_in_enrich_write(self, read_timeout: int) -> subprocess.Popen:
        """`sqe run` (until stopped) with enrich's Kafka state task paused after 50 records
        reached `enriched`; returns once load has loaded those 50."""
        command = _command(self.path, self.tmp / "ck", self.kafka, self.redis_url, None,
                           "--conf", f"jw.sqe.spout.kafka.readTimeoutSeconds={read_timeout}")
        proc = start_with_fault(command, "kafka-state-sent@50", self.marker, self.log, "resume")
        wait_for_fault(proc, self.marker, self.log)
        _wait_until("load caught up with what enrich wrote before its pause",
                    lambda: _load_log_count(self.redis_url) == 50, proc, self.log)
        assert len(read_topic(self.kafka, "enriched")) == 50
        self.proc = proc
        return proc

    def enriched_keys(self) -> Counter:
        return Counter(StreamMetadata.from_bytes(r.key) for r in read_topic(self.kafka, "enriched"))


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_kafka_broker_back_within_read_timeout_the_query_survives_exactly(redis_url, tmp_path):
    with _KafkaChain(tmp_path, redis_url) as chain:
        produce_events(chain.kafka, "events", 200, partitions=1)
        proc = chain.start_paused_in_enrich_write(read_timeout=90)
        # The broker goes away in the middle of enrich's write; load's planner is polling.
        # 35 s: longer than one metadata request's 30 s timeout, shorter than 90 s.
        chain.broker.stop()
        chain.marker.unlink()  # enrich's task goes on: its other 150 records wait in the producer
        time.sleep(35)
        assert proc.poll() is None, "\n".join(_errors(chain.log))
        chain.restart_broker()
        _wait_until("wave 1 loaded after the restart",
                    lambda: _load_log_count(redis_url) == 200, proc, chain.log,
                    marker=chain.marker)
        produce_events(chain.kafka, "events", 200, partitions=1, start=200)
        _wait_until("wave 2 loaded", lambda: _load_log_count(redis_url) == 400, proc, chain.log,
                    marker=chain.marker)
        assert proc.poll() is None  # the same query survived the outage
        kill_group(proc)
        assert _errors(chain.log) == [] and "Traceback" not in chain.log.read_text()
        keys = chain.enriched_keys()
        assert len(keys) == 400  # every event reached `enriched` (some maybe twice: replays)
        _assert_loaded_once(redis_url, _events(range(400)))


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_kafka_broker_away_longer_than_read_timeout_ends_the_run_and_the_rerun_is_exact(
        spark, redis_url, tmp_path):
    with _KafkaChain(tmp_path, redis_url) as chain:
        produce_events(chain.kafka, "events", 200, partitions=1)
        proc = chain.start_paused_in_enrich_write(read_timeout=10)
        chain.broker.stop()
        stopped = time.monotonic()
        chain.marker.unlink()  # enrich's batch now waits in its flush (up to 120 s) ...
        assert proc.wait(240) == 1
        waited = time.monotonic() - stopped
        text = chain.log.read_text()
        (error,) = _errors(chain.log)  # ... while load's planner gives up after 10 s
        assert re.fullmatch(
            rf"error: {re.escape(str(chain.path))}: Kafka source enriched: cannot reach "
            rf"the Kafka brokers 127\.0\.0\.1:{chain.port} for 10 s "
            r"\(jw\.sqe\.spout\.kafka\.readTimeoutSeconds; last error: [^\n]+\); "
            r"the next batch was not started", error), error
        assert "Traceback" not in text
        assert 10 <= waited < 120, waited

        chain.restart_broker()
        produce_events(chain.kafka, "events", 100, partitions=1, start=200)
        conf = _conf(chain.kafka, redis_url)
        # --once fixes each stream's end when it starts, so load sees what enrich writes in
        # the same run only in the next run: two runs, the second one has only load's part.
        reports = _run_once(spark, chain.path, conf, tmp_path / "ck")
        reports += _run_once(spark, chain.path, conf, tmp_path / "ck")
        keys = chain.enriched_keys()
        # enrich's batch 0 ran again: the 50 records it had written before are replays now
        assert len(keys) == 300 and sum(keys.values()) == 350
        assert sum(r.replays_dropped for r in reports) == 50
        _assert_loaded_once(redis_url, _events(range(300)))


# -- 2. Redis restarted, with and without persistence ---------------------------------------------
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_redis_with_aof_keeps_hwms_and_batch_id_through_a_sigkill(spark, kafka_bootstrap,
                                                                  kafka_topic, tmp_path):
    server = RestartableRedis(tmp_path / "redis", aof=True)
    server.start()
    try:
        enriched = kafka_topic(2, "enriched")
        path = _write(tmp_path / "load.yaml", load_commands(enriched))
        conf = _conf(kafka_bootstrap, server.url())
        produce(kafka_bootstrap, enriched, _stamped(range(200)))
        (first,) = _run_once(spark, path, conf, tmp_path / "ck")
        before = _redis_contents(server.url())
        assert before[f"sqe:{{{CONSUMER}}}:batch"] == b"0"
        assert before[f"sqe:{{{CONSUMER}}}:hwm"] == {f"{PID}:0".encode(): b"99",
                                                     f"{PID}:1".encode(): b"99"}

        server.crash()
        server.start()
        assert _redis_contents(server.url()) == before  # marks, their times, batch id, data

        # Upstream re-ran a batch: 60 records again (replays), then 100 new ones.
        produce(kafka_bootstrap, enriched, _stamped(range(140, 200)) + _stamped(range(200, 300)))
        (second,) = _run_once(spark, path, conf, tmp_path / "ck")
        assert (second.batch_id, second.records_read, second.replays_dropped) == (1, 160, 60)
        _assert_loaded_once(server.url(), _events(range(300)))
        assert _hwm_state(server.url())[f"sqe:{{{CONSUMER}}}:batch"] == b"1"
    finally:
        server.stop()


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.postgres
def test_redis_without_persistence_loses_the_marks_and_only_an_accepted_loss_lets_replays_through(
        spark, kafka_bootstrap, kafka_topic, postgres_dsn, tmp_path):
    """Documents why `sqe run` warns about an HWM store without persistence, and why a store
    behind the checkpoint stops the run: the marks are gone, and replays would pass."""
    server = RestartableRedis(tmp_path / "redis", aof=False)
    server.start()
    try:
        enriched = kafka_topic(2, "enriched")
        path = _write(tmp_path / "load.yaml", load_commands(enriched, postgres=True))
        conf = _conf(kafka_bootstrap, server.url(), postgres_dsn)
        produce(kafka_bootstrap, enriched, _stamped(range(200)))
        _run_once(spark, path, conf, tmp_path / "ck")
        assert _hwm_state(server.url())[f"sqe:{{{CONSUMER}}}:batch"] == b"0"

        server.crash()
        server.start()
        assert _redis_contents(server.url()) == {}  # marks, batch id and Redis states: gone

        produce(kafka_bootstrap, enriched, _stamped(range(140, 200)) + _stamped(range(200, 300)))
        with pytest.raises(StoreBehind):  # fails closed: nothing read
            _run_once(spark, path, conf, tmp_path / "ck")
        assert _redis_contents(server.url()) == {}
        assert len(_postgres(postgres_dsn, "SELECT event_id FROM loaded_events")) == 200
        # the loss accepted: what a store without persistence lets through
        (second,) = _run_once(spark, path, conf, tmp_path / "ck", accept_lost_marks=0)
        assert (second.batch_id, second.replays_dropped) == (1, 0)  # nothing left to judge by
        counts = Counter(r[0] for r in _postgres(postgres_dsn,
                                                 "SELECT event_id FROM loaded_events"))
        assert set(counts) == _events(range(300))
        assert sorted(e for e, n in counts.items() if n == 2) == sorted(_events(range(140, 200)))
        assert sum(counts.values()) == 360
    finally:
        server.stop()


# -- 3. Postgres stopped inside a state's commit --------------------------------------------------
@pytest.fixture
def private_postgres():
    """A Postgres cluster of this test's own, which it may stop and start."""
    why = private_postgres_unavailable()
    if why is not None:
        pytest.skip(f"no private Postgres cluster: {why}")
    try:
        pg = PrivatePostgres()
    except RuntimeError as exc:
        pytest.skip(f"no private Postgres cluster: {exc}")
    try:
        pg.start()
        yield pg
    finally:
        pg.close()


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("mode,restart", [("immediate", False), ("fast", True)],
                         ids=["crashed", "restarted-fast"])
@pytest.mark.slow
def test_postgres_stopped_inside_the_commit_heals_in_the_run_or_fails_and_reruns_once(
        spark, kafka_bootstrap, kafka_topic, redis_url, private_postgres, tmp_path, mode,
        restart):
    """The server crashes (immediate: no checkpoint, open transactions lost) and stays down
    longer than the retry time, or restarts (fast: sessions terminated, then started again
    at once), between the batch's rows and its COMMIT.  Restarted, the run sends the batch's
    transaction again and goes on; down, the batch fails in one sentence and the rerun
    loads it once."""
    pg = private_postgres
    enriched = kafka_topic(2, "enriched")
    path = _write(tmp_path / "load.yaml", load_commands(enriched, postgres=True))
    produce(kafka_bootstrap, enriched, _stamped(range(300)) + _stamped(range(280, 300)))
    batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=150",
             "--conf", "jw.sqe.state.postgres.commitRetrySeconds=3")
    marker, log = tmp_path / "pg.marker", tmp_path / "pg.log"
    command = [*_command(path, tmp_path / "ck", kafka_bootstrap, redis_url, pg.dsn, *batch),
               "--once"]
    proc = start_with_fault(command, "postgres-before-commit@1", marker, log, "resume")
    try:
        wait_for_fault(proc, marker, log)  # batch 1: its rows and id sent, COMMIT not yet
        pg.stop(mode)  # the open transaction is lost either way
        if restart:
            pg.start()
        marker.unlink()
        assert proc.wait(300) == (0 if restart else 1), log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = log.read_text()
    assert "Traceback" not in text
    if restart:  # sent again on a new connection, inside the run: every event once
        assert ("batch 1 of load.Enriched: Postgres state loaded_events's connection failed "
                "at the transaction (") in text, text[-3000:]
        rows = _postgres(pg.dsn, "SELECT event_id FROM loaded_events")
        assert Counter(r[0] for r in rows) == Counter(_events(range(300)))
        return
    (error,) = _errors(log)
    assert error.startswith(f"error: {path}: Postgres state loaded_events: "), error
    assert error.endswith("within jw.sqe.state.postgres.commitRetrySeconds)"), error

    pg.start()
    assert len(_postgres(pg.dsn, "SELECT 1 FROM loaded_events")) == 150  # batch 0 only
    assert _postgres(pg.dsn, "SELECT consumer, target, batch_id, rows FROM sqe_batches") == [
        (CONSUMER, "loaded_events", 0, 150)]
    assert _hwm_state(redis_url)[f"sqe:{{{CONSUMER}}}:batch"] == b"0"

    conf = _conf(kafka_bootstrap, redis_url, pg.dsn, **{
        "jw.sqe.spout.kafka.maxRecordsPerBatch": "150"})
    reports = _run_once(spark, path, conf, tmp_path / "ck")
    assert [(r.batch_id, r.records_read, r.replays_dropped) for r in reports] == [
        (1, 150, 0), (2, 20, 20)]
    rows = _postgres(pg.dsn, "SELECT event_id FROM loaded_events")
    assert Counter(r[0] for r in rows) == Counter(_events(range(300)))
    assert _postgres(pg.dsn, "SELECT consumer, target, batch_id FROM sqe_batches") == [
        (CONSUMER, "loaded_events", 2)]
    assert _hwm_state(redis_url)[f"sqe:{{{CONSUMER}}}:batch"] == b"2"
    _assert_loaded_once(redis_url, _events(range(300)))



@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_a_broker_back_without_its_producers_state_fails_the_write_and_the_batch_goes_on(
        redis_url, tmp_path):
    """The broker comes back without its producers' state (as from a snapshot without it):
    enrich's idempotent producer, paused mid-write, goes on with sequence numbers the broker
    no longer knows, is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) and stops for good.  The write
    fails in SQE's sentence (not confluent-kafka's SystemError), the batch is written again
    with a new producer, and the same run goes on exactly."""
    with _KafkaChain(tmp_path, redis_url) as chain:
        produce_events(chain.kafka, "events", 200, partitions=1)
        proc = chain.start_paused_in_enrich_write(read_timeout=90)
        chain.broker.stop()
        assert forget_producers(tmp_path / "kafka") >= 2  # enrich's, on both partitions
        chain.restart_broker()
        chain.marker.unlink()
        _wait_until("every event loaded after the restart",
                    lambda: _load_log_count(redis_url) == 200, proc, chain.log,
                    marker=chain.marker)
        produce_events(chain.kafka, "events", 100, partitions=1, start=200)
        _wait_until("the next events loaded", lambda: _load_log_count(redis_url) == 300, proc,
                    chain.log, marker=chain.marker)
        assert proc.poll() is None  # the same run went on
        kill_group(proc)
        text = chain.log.read_text()
        assert "delivery failed (the producer stopped for good (OUT_OF_ORDER_SEQUENCE_NUMBER" \
            in text, text[-3000:]
        assert _errors(chain.log) == [] and "SystemError" not in text and "Traceback" not in text
        assert "which finds the record behind it" not in text  # a store's failure, not a value's
        assert len(chain.enriched_keys()) == 300
        _assert_loaded_once(redis_url, _events(range(300)))
