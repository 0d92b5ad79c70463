"""sqe run end to end: counters, bad input, outages of Redis and Kafka, the CLI and spark-submit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sqe.cli.local_services import free_port, start_local_kafka, start_local_redis
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import RunError, SqeError
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata
from tests.support import fixed_words, sqe_cli
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 777


def _topology(tmp_path: Path, source: str, dest: str, deserializer: str = "json") -> Path:
    """Read `source` with replay filtering, keep two fields, write `dest` keyed by StreamMetadata."""
    fields = ["id", "amount"] if deserializer == "json" else ["Message"]
    exprs = ["id", "amount"] if deserializer == "json" else ["_value"]
    commands = [
        {"CreateStream": {"streamName": "In", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": deserializer,
                          "options": {"jw.sqe.spout.kafka.filterReplays": True}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": fields,
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": exprs}, "from": {"objectName": "In"}}},
    ]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(commands))
    return path


def _plan(path: Path, kafka: str, redis_url: str, **extra):
    conf = {"jw.sqe.spout.kafka.brokers": kafka, "jw.sqe.state.kafka.brokers": kafka,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url, **extra}
    return plan_topology(load_topology(path), conf=conf)


def _key(offset: int, partition: int = 0) -> bytes:
    return StreamMetadata(PID, partition, offset).to_bytes()


def test_keys_that_cannot_be_judged_pass_through_counted(spark, kafka_bootstrap, kafka_topic, redis_url,
                                                 tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    good = [(_key(o), json.dumps({"id": f"r{o}", "amount": o}).encode(), 0) for o in (0, 1, 2)]
    produce(kafka_bootstrap, source, [
        *good,
        (_key(1), b'{"id": "replay", "amount": 1}', 0),          # a replay: dropped
        (b"k" * 19, b'{"id": "short-key", "amount": 5}', 0),     # cannot be judged: kept
        (None, b'{"id": "null-key", "amount": 6}', 0),           # cannot be judged: kept
    ])
    queries = []
    plan = _plan(_topology(tmp_path, source, dest), kafka_bootstrap, redis_url,
                 **{"jw.sqe.spout.observedMetrics": True})
    reports = run_topology(plan, spark, "bad", tmp_path / "ck", "once", on_start=queries.extend)

    out = read_topic(kafka_bootstrap, dest)
    values = [json.loads(r.value) for r in out]
    assert [v.get("id") for v in values] == ["r0", "r1", "r2", "short-key", "null-key"]
    assert [StreamMetadata.from_bytes(r.key).offset for r in out] == [0, 1, 2, 4, 5]
    (report,) = reports
    assert (report.records_read, report.replays_dropped, report.unparseable_keys,
            report.unparseable_values) == (6, 1, 2, 0)
    assert "1 replays dropped, 2 records with keys that cannot be judged passed through" in report.line()
    metrics = queries[0].lastProgress["observedMetrics"]["sqe.In"]
    assert (metrics["records_passed"], metrics["replays_dropped"], metrics["unparseable_keys"]) == (
        5, 1, 2)


def test_redis_outage_fails_the_batch_and_loses_nothing(spark, kafka_bootstrap, kafka_topic,
                                                       tmp_path):
    port = free_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    server = start_local_redis(redis_dir, port)
    url = f"redis://127.0.0.1:{port}/0"
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1, 2, 1)])
    try:
        run_topology(_plan(path, kafka_bootstrap, url), spark, "outage", tmp_path / "ck", "once")
        import redis

        redis.Redis.from_url(url).save()  # keep the HWMs across the restart below
    finally:
        server.stop()
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (2, 3, 4)])
    with pytest.raises(SqeError, match=rf"127\.0\.0\.1:{port}"):  # before anything is read
        run_topology(_plan(path, kafka_bootstrap, url), spark, "outage", tmp_path / "ck", "once")
    server = start_local_redis(redis_dir, port)
    try:
        run_topology(_plan(path, kafka_bootstrap, url), spark, "outage", tmp_path / "ck", "once")
    finally:
        server.stop()
    assert [r.value for r in read_topic(kafka_bootstrap, dest)] == [b"0", b"1", b"2", b"3", b"4"]


def test_kafka_outage_fails_the_batch_and_loses_nothing(spark, redis_url, tmp_path):
    port = free_port()
    broker = start_local_kafka(tmp_path / "kafka", port)
    kafka = broker.address
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka})
    for topic in ("in", "out"):
        admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result(30)
    path = _topology(tmp_path, "in", "out", "identity")
    conf = {"jw.sqe.spout.kafka.readTimeoutSeconds": 5}
    try:
        produce(kafka, "in", [(_key(o), b"%d" % o, 0) for o in (0, 1, 2)])
        run_topology(_plan(path, kafka, redis_url, **conf), spark, "k", tmp_path / "ck", "once")
    finally:
        broker.stop()
    with pytest.raises(SqeError, match=rf"cannot reach the Kafka brokers 127\.0\.0\.1:{port}"):
        run_topology(_plan(path, kafka, redis_url, **conf), spark, "k", tmp_path / "ck", "once")
    broker = start_local_kafka(tmp_path / "kafka", port)
    try:
        produce(kafka, "in", [(_key(o), b"%d" % o, 0) for o in (2, 3)])
        run_topology(_plan(path, kafka, redis_url, **conf), spark, "k", tmp_path / "ck", "once")
        assert [r.value for r in read_topic(kafka, "out")] == [b"0", b"1", b"2", b"3"]
    finally:
        broker.stop()


@pytest.mark.slow
def test_cli_run_exit_codes(kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    bad = sqe_cli("run", str(path), "--conf", "jw.sqe.spout.kafka.filterReplay=true")
    assert bad.returncode == 2
    assert "did you mean jw.sqe.spout.kafka.filterReplays?" in bad.stderr

    dead = f"127.0.0.1:{free_port()}"
    down = sqe_cli("run", str(path), "--once", "--checkpoint", str(tmp_path / "ck1"),
                "--conf", f"jw.sqe.spout.kafka.brokers={dead}",
                "--conf", "jw.sqe.spout.kafka.readTimeoutSeconds=3",
                "--conf", f"jw.sqe.spout.kafka.filterReplays.redis.url={redis_url}")
    assert down.returncode == 1
    assert f"cannot reach the Kafka brokers {dead}" in down.stderr
    assert "Traceback" not in down.stderr and "py4j" not in down.stderr.lower()
    # librdkafka's retries and Spark's warnings stay quiet: the sentence is what is printed
    assert "rdkafka" not in down.stderr and "kafka: " not in down.stderr
    assert not re.search(r"\bWARN\b", down.stderr), down.stderr

    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1, 0, 2)])
    ok = sqe_cli("run", str(path), "--once", "--checkpoint", str(tmp_path / "ck2"),
              "--conf", f"jw.sqe.spout.kafka.brokers={kafka_bootstrap}",
              "--conf", f"jw.sqe.state.kafka.brokers={kafka_bootstrap}",
              "--conf", f"jw.sqe.spout.kafka.filterReplays.redis.url={redis_url}")
    assert ok.returncode == 0, ok.stderr
    assert "4 records read, 1 replays dropped, 3 rows written" in ok.stdout
    # off a terminal, the progress is a plain line per batch, with the backlog left
    assert re.search(r"^sqe: In: 4 records in 1 batch, [\d,]+ records/s, 1 dropped as replays; "
                     r"0 behind$", ok.stderr, re.M), ok.stderr
    assert not re.search(r"\bWARN\b", ok.stderr), ok.stderr
    assert [r.value for r in read_topic(kafka_bootstrap, dest)] == [b"0", b"1", b"2"]


def test_spark_submit_runs_the_same_entry_point(kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1, 1, 2)])
    submit = Path(sys.executable).parent / "spark-submit"
    script = subprocess.run([sys.executable, "-m", "sqe.cli.submit", "--path"], capture_output=True,
                            text=True, check=True).stdout.strip()
    done = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.jw.sqe.spout.kafka.filterReplays.redis.url={redis_url}",
         script, str(path), "--once", "--checkpoint", str(tmp_path / "ck"),
         "--conf", f"jw.sqe.spout.kafka.brokers={kafka_bootstrap}",
         "--conf", f"jw.sqe.state.kafka.brokers={kafka_bootstrap}"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 records read, 1 replays dropped, 3 rows written" in done.stdout
    assert [r.value for r in read_topic(kafka_bootstrap, dest)] == [b"0", b"1", b"2"]


def test_a_store_ahead_of_the_checkpoint_stops_the_run_before_it_reads(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    from sqe.engine.run.recovery import CheckpointMismatch
    from sqe.ledger.hwm import HwmStore

    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1)])
    store = HwmStore.from_url(redis_url, "fence.In", 3600)
    store.commit(0, {})  # batch 0, committed by a version that recorded no offsets
    with pytest.raises(CheckpointMismatch, match=r"ck/In has no batch yet, but consumer "
                                                 r"'fence.In' has committed batch 0 .*sqe reset"):
        run_topology(_plan(path, kafka_bootstrap, redis_url), spark, "fence", tmp_path / "ck",
                     "once")
    assert read_topic(kafka_bootstrap, dest) == []
    store.reset()  # start over on purpose: the batch ids go on after 0
    (report,) = run_topology(_plan(path, kafka_bootstrap, redis_url), spark, "fence",
                             tmp_path / "ck", "once")
    assert report.batch_id == 1 and [r.value for r in read_topic(kafka_bootstrap, dest)] == [
        b"0", b"1"]
    assert store.load().commit.offsets == '{"0": 2}'
    store.commit(5, {})  # another writer of this consumer is at batch 5
    produce(kafka_bootstrap, source, [(_key(2), b"2", 0)])
    with pytest.raises(CheckpointMismatch, match=r"ck/In ends at batch 1, but consumer "
                                                 r"'fence.In' has committed batch 5"):
        run_topology(_plan(path, kafka_bootstrap, redis_url), spark, "fence", tmp_path / "ck",
                     "once")
    assert len(read_topic(kafka_bootstrap, dest)) == 2


def test_runtime_mode_processes_what_arrives_then_stops(spark, kafka_bootstrap, kafka_topic,
                                                       redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1, 1, 2)])
    queries = []
    run_topology(_plan(path, kafka_bootstrap, redis_url), spark, "rt", tmp_path / "ck", "runtime",
                 runtime=15, on_start=queries.extend)
    assert not queries[0].isActive
    assert [r.value for r in read_topic(kafka_bootstrap, dest)] == [b"0", b"1", b"2"]
    # without jw.sqe.spout.observedMetrics Spark does not count the rows a second time
    progress = [p for p in queries[0].recentProgress if p["numInputRows"]]
    assert progress and not [p for p in progress if p.get("observedMetrics")]


def test_a_runtime_that_ends_inside_a_batch_lets_that_batch_finish(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, monkeypatch):
    """The batch in progress when the runtime is over commits whole (it is held at its
    commit past the deadline, then let go), and the run ends after it."""
    import threading

    from sqe.ledger.hwm import HwmStore

    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    produce(kafka_bootstrap, source, [(_key(o), b"%d" % o, 0) for o in (0, 1, 2)])
    marker = tmp_path / "marker"
    monkeypatch.setenv("SQE_FAULT", "before-commit")
    monkeypatch.setenv("SQE_FAULT_ACTION", "resume")
    monkeypatch.setenv("SQE_FAULT_MARKER", str(marker))
    reports: list = []
    runtime = 20  # long enough for a cold session to start its first batch
    run = threading.Thread(target=lambda: reports.extend(run_topology(
        _plan(path, kafka_bootstrap, redis_url), spark, "late", tmp_path / "ck", "runtime",
        runtime=runtime)))
    begin = time.monotonic()
    run.start()
    deadline = begin + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "the first batch never reached its commit"
    assert time.monotonic() < begin + runtime, "the first batch began after the runtime"
    time.sleep(begin + runtime + 3 - time.monotonic())  # past the runtime: still being written
    marker.unlink()
    run.join(120)
    assert not run.is_alive()
    assert [r.batch_id for r in reports] == [0]
    assert [r.value for r in read_topic(kafka_bootstrap, dest)] == [b"0", b"1", b"2"]
    store = HwmStore.from_url(redis_url, "late.In", 3600)
    assert store.last_commit().batch_id == 0
    store.client.close()


def test_a_field_no_record_of_the_first_batch_holds_stops_the_run_before_it_writes(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest)
    path.write_text(path.read_text().replace("- amount\n", "- amout\n"))  # a misspelt field
    produce(kafka_bootstrap, source, [(_key(o), json.dumps({"id": o, "amount": o * 10}).encode(),
                                       0) for o in range(3)])
    with pytest.raises(RunError, match=r"topology.yaml: command 2 \(Query\) -> select -> "
                                       r"expression 2: no record of the first batch of stream In "
                                       rf"\(topic {source}\) has a field amout \(did you mean "
                                       r"amount\?\), so the run stops before writing anything"):
        run_topology(_plan(path, kafka_bootstrap, redis_url), spark, "typo", tmp_path / "ck",
                     "once")
    assert read_topic(kafka_bootstrap, dest) == []


def test_spark_sql_spark_cannot_analyse_is_one_sentence_naming_the_expression(spark, tmp_path):
    """sqlglot parses these and every function exists; only Spark's analysis (types) refuses
    them: the run stops at its first batch naming the command and the expression, with
    Spark's reason and none of the JVM's or PySpark's stack traces."""
    path = fixed_words(tmp_path, {"sql": "array_contains(word, 'h')"})
    failed = sqe_cli("run", str(path), "--once", "--checkpoint", str(tmp_path / "ck"))
    assert failed.returncode == 1
    lines = [x for x in failed.stderr.splitlines() if not x.startswith("WARNING: Using incubator")]
    assert lines == [
        f"error: {path}: command 2 (Query) -> select -> expression 2: Spark cannot compile it: "
        '[DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] Cannot resolve "array_contains(word, h)" due '
        'to data type mismatch: The first parameter requires the "ARRAY" type, however "word" '
        'has the type "STRING". SQLSTATE: 42K09'], failed.stderr

    where = fixed_words(tmp_path, "n", where={"sql": "map(word, n)"})  # not a condition
    with pytest.raises(RunError, match=r"words.yaml: command 2 \(Query\) -> where: Spark cannot "
                                       r"compile it: \[DATATYPE_MISMATCH"):
        run_topology(plan_topology(load_topology(where)), spark, "words", tmp_path / "ck2",
                     "once")


def test_a_value_spark_cannot_compute_is_one_sentence_naming_the_record(tmp_path):
    """A record whose value a query cannot cast (Spark's ANSI error at run time) stops the run
    with one sentence naming its topic, partition and offset, the query and Spark's reason."""
    path = fixed_words(tmp_path, {"sql": "cast(word as int)"}, where={"=": ["n", 2]})
    failed = sqe_cli("run", str(path), "--once", "--checkpoint", str(tmp_path / "ck"))
    assert failed.returncode == 1
    lines = [x for x in failed.stderr.splitlines() if not x.startswith("WARNING: Using incubator")]
    assert len(lines) == 1, failed.stderr
    assert re.match(
        rf"error: bad record at words/0 offset 1: {re.escape(str(path))}: command 2 \(Query\): "
        r"\[CAST_INVALID_INPUT\] The value 'b' of the type \"STRING\" cannot be cast to \"INT\" "
        r"because it is malformed; the batch fails and nothing of it is committed "
        r"\(jw.sqe.spout.kafka.badRecordPolicy: deadletter", lines[0]), lines[0]


def test_a_trigger_interval_spaces_the_batches_of_a_steady_input(spark, kafka_bootstrap,
                                                                 kafka_topic, redis_url,
                                                                 tmp_path, caplog):
    """jw.sqe.trigger.intervalSeconds: a batch starts at most once per interval, however much
    arrives meanwhile (without it, a record every 0.3 s makes a batch as soon as the last ends);
    at the info log level, Spark's timing of the batches is logged."""
    import doctest
    import logging
    import threading

    import sqe.engine.run.triggers

    assert doctest.testmod(sqe.engine.run.triggers).failed == 0
    source, dest = kafka_topic(1, "in"), kafka_topic(1, "out")
    path = _topology(tmp_path, source, dest, "identity")
    done = threading.Event()

    def feed() -> None:
        offset = 0
        while not done.is_set():
            produce(kafka_bootstrap, source, [(_key(offset), b"%d" % offset, 0)])
            offset += 1
            done.wait(0.3)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    os.environ["SQE_LOG_LEVEL"] = "info"
    try:
        with caplog.at_level(logging.INFO, logger="sqe"):
            reports = run_topology(
                _plan(path, kafka_bootstrap, redis_url, **{"jw.sqe.trigger.intervalSeconds": 6}),
                spark, "tick", tmp_path / "ck", "runtime", runtime=40)
    finally:
        os.environ.pop("SQE_LOG_LEVEL")
        done.set()
        feeder.join()
    starts = [r.started for r in reports]
    assert len(starts) >= 4, reports
    # Spark starts a batch at the next multiple of 6 s of its clock, or at once when the last
    # one ran past it: the first (which pays the session's warm-up) may, and the one after it
    # then starts off the clock's multiples.  So may any later batch that starts late on a
    # loaded machine, and the one after it, back on the multiples, follows it sooner: two
    # gaps together still span two intervals, where without the interval they span seconds
    gaps = [b - a for a, b in zip(starts[2:], starts[3:], strict=False)]
    spans = [a + b for a, b in zip(gaps, gaps[1:], strict=False)] or [2 * gaps[0]]
    # a batch's start is seen when its planning ends, which a loaded machine delays by up to
    # a second or so (a CI run beside two nemesis seeds: gaps 5.5, 5.9, 6.0 s)
    assert min(spans) >= 10, gaps
    timed = [m for m in caplog.messages if m.startswith("Spark trigger of tick.In batch")]
    assert timed and "addBatch" in timed[-1], caplog.messages
