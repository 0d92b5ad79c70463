"""Exactly-once through crashes: real `sqe run` processes, SIGKILLed at chosen points.

The chain is the shipped enrich.yaml -> `enriched` -> load.yaml, with one more
query in load: a Postgres table of every loaded record.  Fault points
(:mod:`sqe.faults`) only say *where* a process stands when the test kills it
for real with SIGKILL of its whole process group (driver, JVM, Python workers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import redis
import yaml

from sqe.cli.local_services import service_conf, start_local_redis
from sqe.cli.sample_events import produce_events
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from sqe.source.admission import ADMISSION_CONTROL
from sqe.wire.keys import StreamMetadata
from tests.support import ROOT
from tests.support.kafka_io import Record, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.postgres]

EVENTS = 3000


def load_commands(enriched: str, postgres: bool = False) -> list[dict]:
    """The shipped load.yaml on topic ``enriched`` (and a Postgres table of every record)."""
    load = yaml.safe_load((ROOT / "topologies/load.yaml").read_text())
    load[0]["CreateStream"]["objectName"] = enriched
    if postgres:
        load.append({"Query": {
            "insertInto": {"objectName": "loaded_events", "stateName": "POSTGRES",
                           "fields": ["event_id", "region", "amount_cents", "position"]},
            "select": {"expressions": ["event_id", "region", "amount_cents",
                                       {"sql": "concat(_partition, ':', _offset)"}]},
            "from": {"objectName": "Enriched"}}})
    return load


class Chain:
    """The shipped topologies on fresh topics, run as `sqe run` subprocesses."""

    def __init__(self, tmp: Path, kafka: str, events: str, enriched: str, redis_url: str,
                 dsn: str) -> None:
        self.tmp, self.kafka, self.redis_url, self.dsn = tmp, kafka, redis_url, dsn
        self.events, self.enriched = events, enriched
        enrich = yaml.safe_load((ROOT / "topologies/enrich.yaml").read_text())
        enrich[0]["CreateStream"]["objectName"] = events
        enrich[1]["Query"]["insertInto"]["objectName"] = enriched
        load = load_commands(enriched, postgres=True)
        self.files = {}
        for name, commands in (("enrich", enrich), ("load", load)):
            self.files[name] = tmp / f"{name}.yaml"
            self.files[name].write_text(yaml.safe_dump(commands, sort_keys=False))

    def command(self, name: str, checkpoint: str | None = None, *extra: str) -> list[str]:
        return [sys.executable, "-m", "sqe.cli.main", "run", str(self.files[name]), "--once",
                "--checkpoint", str(self.tmp / (checkpoint or name)),
                "--config", str(ROOT / "conf/local.yaml"),
                *service_conf(self.kafka, self.redis_url, self.dsn), *extra]

    def run(self, name: str, *extra: str, checkpoint: str | None = None
            ) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(name, checkpoint, *extra), capture_output=True,
                              text=True, timeout=900)

    def start_with_fault(self, name: str, fault: str, action: str = "wait", *extra: str
                         ) -> tuple[subprocess.Popen, Path]:
        marker, log = self.tmp / f"{name}.marker", self.tmp / f"{name}.{fault}.log"
        proc = start_with_fault(self.command(name, None, *extra), fault, marker, log, action)
        return proc, marker

    def wait(self, proc: subprocess.Popen, name: str, fault: str) -> None:
        wait_for_fault(proc, self.tmp / f"{name}.marker", self.tmp / f"{name}.{fault}.log")

    def log(self, name: str, fault: str) -> str:
        return (self.tmp / f"{name}.{fault}.log").read_text()


def _postgres_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT event_id, region, amount_cents, position "
                            "FROM loaded_events").fetchall()


def _redis_view(url: str) -> dict:
    client = redis.Redis.from_url(url)
    try:
        log = client.hgetall("load_log")
        by_region = {k.decode(): client.hgetall(k) for k in client.keys("*")
                     if not k.startswith(b"sqe:") and k != b"load_log"}
        return {"log": log, "by_region": by_region,
                "stages": sorted(client.keys("sqe:*:stage:*"))}
    finally:
        client.close()


def _assert_each_event_once(chain: Chain, expected: set[str]) -> None:
    rows = _postgres_rows(chain.dsn)
    counts = Counter(r[0] for r in rows)
    assert len(rows) == len(expected) and set(counts) == expected, (
        f"Postgres: {len(rows)} rows, duplicated: {[e for e, n in counts.items() if n > 1][:5]}")
    view = _redis_view(chain.redis_url)
    log_ids = Counter(v.decode() for v in view["log"].values())
    assert len(view["log"]) == len(expected) and set(log_ids) == expected, (
        f"Redis load_log: {len(view['log'])} fields, duplicated: "
        f"{[e for e, n in log_ids.items() if n > 1][:5]}")
    in_regions = [e.decode() for fields in view["by_region"].values() for e in fields]
    assert sorted(in_regions) == sorted(expected)
    assert view["stages"] == []


def crash_enrich_and_run_it_again(chain: Chain, expected: set[str]) -> list[Record]:
    """Kill enrich in the middle of its only batch, after part of it reached `enriched`, and
    run it again: `enriched` then provably holds replays, each event keyed once by its source
    (its StreamMetadata) and placed by source partition.  Returns `enriched`'s records."""
    proc, _ = chain.start_with_fault("enrich", "kafka-state-sent@400")
    chain.wait(proc, "enrich", "kafka-state-sent@400")
    time.sleep(1.0)  # let the other task reach the point too
    kill_group(proc)
    sent_before_crash = len(read_topic(chain.kafka, chain.enriched))
    assert 400 <= sent_before_crash < len(expected)
    done = chain.run("enrich")
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_topic(chain.kafka, chain.enriched)
    keys = [StreamMetadata.from_bytes(r.key) for r in records]
    assert len(set(keys)) == len(expected) and len(records) - len(expected) == sent_before_crash
    assert all(k.partition == r.partition for k, r in zip(keys, records, strict=True))
    assert {json.loads(r.value)["event_id"] for r in records} == expected
    return records


@pytest.mark.slow
@pytest.mark.smoke
def test_sigkill_of_enrich_mid_batch_and_of_load_before_its_commit(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    chain = Chain(tmp_path, kafka_bootstrap, events, enriched, redis_url, postgres_dsn)
    produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
    expected = {f"e{i}" for i in range(EVENTS)}

    records = crash_enrich_and_run_it_again(chain, expected)
    replays = len(records) - EVENTS

    # 3. load dies after its sinks were written, before its HWM commit.
    batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=2000")
    proc, _ = chain.start_with_fault("load", "before-commit", "wait", *batch)
    chain.wait(proc, "load", "before-commit")
    kill_group(proc)
    written = _postgres_rows(postgres_dsn)
    # Postgres committed the batch with its id (a --once run is one batch where PySpark has no
    # admission control, sqe.source.admission) ...
    assert 0 < len(written) <= (2000 if ADMISSION_CONTROL else EVENTS)
    view = _redis_view(redis_url)
    assert view["log"] == {} and view["by_region"] == {}  # ... Redis holds only the stage
    assert len(view["stages"]) == 2

    # 4. the restart re-runs that batch: Postgres holds it already, Redis applies it once.
    done = chain.run("load", *batch)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded_events held this batch already" in done.stderr
    if not ADMISSION_CONTROL:  # said at start (sqe.source.admission)
        assert "has no admission control for Python sources (it came in 4.2)" in done.stderr
    dropped = [int(n) for n in re.findall(r"(\d+) replays dropped", done.stderr)]
    assert sum(dropped) == replays  # the batch re-run after the crash re-read none of them
    _assert_each_event_once(chain, expected)


def _enriched_records(kafka: str, topic: str, count: int, pid: int = 4242) -> None:
    """``count`` records as enrich writes them (StreamMetadata keys), plus 10 replays."""
    rows = []
    for i in range(count):
        event = {"event_id": f"e{i}", "region": ["EU", "US"][i % 2], "amount_cents": i * 100}
        rows.append((StreamMetadata(pid, i % 2, i // 2).to_bytes(), json.dumps(event).encode(),
                     i % 2))
    produce(kafka, topic, rows + rows[:10])


@pytest.mark.slow
def test_a_stale_writer_is_refused_and_changes_nothing(kafka_bootstrap, kafka_topic, redis_url,
                                                      postgres_dsn, tmp_path):
    enriched = kafka_topic(2, "enriched")
    chain = Chain(tmp_path, kafka_bootstrap, "unused", enriched, redis_url, postgres_dsn)
    _enriched_records(kafka_bootstrap, enriched, 400)
    first = chain.run("load", "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=150")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "load: 3 batch(es)" in first.stdout
    before = (_redis_view(redis_url), sorted(_postgres_rows(postgres_dsn)))
    hwm_keys = redis.Redis.from_url(redis_url).hgetall("sqe:{load.Enriched}:hwm")

    # A second process, same consumer (load.Enriched), its own new checkpoint: it stops before
    # reading, since the stores hold batch 2 and its checkpoint nothing.
    _enriched_records(kafka_bootstrap, enriched, 20)  # it would have something to write
    stale = chain.run("load", checkpoint="other-checkpoint")
    assert stale.returncode == 1
    assert ("other-checkpoint/Enriched has no batch yet, but consumer 'load.Enriched' has "
            "committed batch 2" in stale.stderr)
    assert "Traceback" not in stale.stderr, stale.stderr
    assert (_redis_view(redis_url), sorted(_postgres_rows(postgres_dsn))) == before
    assert redis.Redis.from_url(redis_url).hgetall("sqe:{load.Enriched}:hwm") == hwm_keys
    assert len(before[1]) == 400


def _waiting_for_a_batch(dsn: str) -> bool:
    """Whether a session waits for one that writes this schema's batch table (``sqe_batches``)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity w WHERE EXISTS (SELECT 1 FROM pg_locks l "
            "WHERE l.pid = ANY(pg_blocking_pids(w.pid)) "
            "AND l.relation = to_regclass('sqe_batches'))").fetchone()
    return bool(row and row[0])


@pytest.mark.slow
def test_a_writer_refused_by_postgres_stages_nothing_and_names_the_other(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    """Two `sqe run` of load on separate checkpoints, both in batch 0: the first stops with its
    Postgres rows sent and not committed; the second waits for the first's lock before it
    stages anything (a batch stages its Redis rows once every state is open).  When the first
    commits, the second is refused by the batch table, names the first, and leaves no stage."""
    enriched = kafka_topic(2, "enriched")
    chain = Chain(tmp_path, kafka_bootstrap, "unused", enriched, redis_url, postgres_dsn)
    _enriched_records(kafka_bootstrap, enriched, 400)
    first, marker = chain.start_with_fault(
        "load", "postgres-before-commit@0", "resume",
        "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=150")
    chain.wait(first, "load", "postgres-before-commit@0")
    with open(tmp_path / "second.log", "w") as log:
        second = subprocess.Popen(chain.command("load", "second"), stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while not _waiting_for_a_batch(postgres_dsn):
            assert second.poll() is None, (tmp_path / "second.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the second run never reached Postgres"
            time.sleep(0.5)
        assert len(_redis_view(redis_url)["stages"]) == 2  # the first run's two states only
        marker.unlink()  # the first run commits batch 0, and goes on
        assert second.wait(600) == 1
        assert first.wait(600) == 0, chain.log("load", "postgres-before-commit@0")[-3000:]
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                kill_group(proc)
    refusal = (tmp_path / "second.log").read_text()
    ahead = re.escape(str(tmp_path / "load" / "Enriched"))
    assert re.search(r"Postgres state loaded_events: batch 0 of consumer 'load.Enriched' ends at "
                     r"other source offsets \(.*\) than batch 0, which another writer of "
                     rf"consumer 'load.Enriched' committed \(the run on checkpoint {ahead}, "
                     r"ending at source offsets \{.*\}\); that run is ahead", refusal), refusal
    assert "Traceback" not in refusal
    _assert_each_event_once(chain, {f"e{i}" for i in range(400)})  # and no stage is left


@pytest.mark.slow
def test_redis_down_at_commit_fails_the_batch_and_the_retry_commits_once(
        kafka_bootstrap, kafka_topic, postgres_dsn, tmp_path):
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    server = start_local_redis(redis_dir)
    port = int(server.address.rsplit(":", 1)[1])
    url = f"redis://127.0.0.1:{port}/0"
    enriched = kafka_topic(2, "enriched")
    chain = Chain(tmp_path, kafka_bootstrap, "unused", enriched, url, postgres_dsn)
    _enriched_records(kafka_bootstrap, enriched, 300)
    try:
        proc, marker = chain.start_with_fault("load", "before-commit", "resume")
        chain.wait(proc, "load", "before-commit")
        redis.Redis.from_url(url).save()  # keep the stage, to show it is all that was written
        server.stop()
        marker.unlink()  # the batch goes on to its commit, with Redis down
        assert proc.wait(300) == 1
        log = chain.log("load", "before-commit")
        assert f"cannot commit the HWMs of load.Enriched: Redis at {url}: " in log
        assert "Traceback" not in log
    finally:
        server.stop()
    server = start_local_redis(redis_dir, port)
    try:
        view = _redis_view(url)
        assert view["log"] == {} and view["by_region"] == {} and len(view["stages"]) == 2
        assert redis.Redis.from_url(url).get("sqe:{load.Enriched}:batch") is None
        assert len(_postgres_rows(postgres_dsn)) == 300  # its transaction held batch 0

        retry = chain.run("load")
        assert retry.returncode == 0, retry.stderr[-3000:]
        assert "loaded_events held this batch already" in retry.stderr
        _assert_each_event_once(chain, {f"e{i}" for i in range(300)})
        assert redis.Redis.from_url(url).get("sqe:{load.Enriched}:batch") == b"0"
    finally:
        server.stop()
