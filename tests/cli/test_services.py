"""Round trips through the real services the suite runs against, so a broken one fails loudly;
and ``sqe services`` (start, status, stop) run as an operator runs it, as real processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sqe.cli.local_services import free_port, service_conf
from sqe.clients.redis_endpoint import persistence_warning
from sqe.wire.keys import StreamMetadata, decode_keys, kafka_secondary_id, pid_for
from tests.support import ROOT


def test_kafka_round_trip_with_stream_metadata_keys(kafka_bootstrap, kafka_topic,
                                                    kafka_consumer_conf):
    topic = kafka_topic(partitions=4)
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 4
    pid = pid_for("test", "Source", kafka_secondary_id(metadata.cluster_id,
                                                       kafka_bootstrap.split(","), topic))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {p: [] for p in range(4)}
    errors = []
    for i in range(40):
        part = i % 4
        key = StreamMetadata(pid, part, i).to_bytes()
        sent[part].append(key)
        producer.produce(topic, key=key, value=f"v{i}".encode(), partition=part,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []

    consumer = Consumer(kafka_consumer_conf)
    try:
        for part in range(4):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
            assert (low, high) == (0, 10)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        got = []
        while len(got) < 40:
            batch = consumer.consume(num_messages=40 - len(got), timeout=10)
            assert batch, f"only {len(got)} of 40 records came back"
            for msg in batch:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    for part in range(4):
        records = sorted((m for m in got if m.partition() == part), key=lambda m: m.offset())
        assert [m.offset() for m in records] == list(range(10))
        keys = pa.array([m.key() for m in records], type=pa.binary())
        assert keys.to_pylist() == sent[part]
        pids, parts, offsets, valid = decode_keys(keys)
        assert valid.all() and set(pids.tolist()) == {pid} and set(parts.tolist()) == {part}
        assert offsets.tolist() == [part + 4 * j for j in range(10)]


def test_redis_round_trip_and_isolated_databases(redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0  # each test starts with an empty database of its own
        client.hset("hwm", mapping={"1:0": 41, "1:1": 7})
        assert client.eval("return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)", 1, "hwm", "1:0") == 42
        assert {k.decode(): int(v) for k, v in client.hgetall("hwm").items()} == {"1:0": 42, "1:1": 7}
    finally:
        client.close()


def test_redis_databases_do_not_leak_between_tests(redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0 and client.exists("hwm") == 0
    finally:
        client.close()


def _decode_batches(batches):
    for batch in batches:
        pid, part, off, valid = decode_keys(batch.column("key"))
        yield pa.RecordBatch.from_arrays(
            [pa.array(pid), pa.array(part), pa.array(off), pa.array(valid)],
            names=["pid", "partition", "offset", "valid"],
        )


def _worker_python(batches):
    import pyspark

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"executable": [sys.executable] * batch.num_rows,
                                          "pyspark": [pyspark.__file__] * batch.num_rows})


def test_spark_workers_run_this_interpreter_and_package(spark):
    """Workers run this interpreter, and import pyspark from the installed package (its
    bytecode cached), not from Spark's pyspark.zip (compiled again by every worker)."""
    import pyspark

    seen = {(r.executable, str(Path(r.pyspark).resolve())) for r in spark.range(4).mapInArrow(
        _worker_python, "executable string, pyspark string").collect()}
    assert seen == {(sys.executable, str(Path(pyspark.__file__).resolve()))}
    keys = [StreamMetadata(-3, p, 10 + p).to_bytes() for p in range(6)] + [None, b"short"]
    df = spark.createDataFrame([(k,) for k in keys], "key binary")
    out = df.mapInArrow(_decode_batches,
                        "pid long, partition int, offset long, valid boolean").collect()
    rows = sorted((r.pid, r.partition, r.offset, r.valid) for r in out)
    assert rows == sorted([(-3, p, 10 + p, True) for p in range(6)] + [(0, 0, 0, False)] * 2)
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


# ---- sqe services, as real processes ----------------------------------------------------------

BIN = Path(sys.executable).parent  # the venv the tests run in: its sqe, as the docs' .venv/bin


def _env(tmp: Path) -> dict[str, str]:
    """The environment of an operator whose home and cache are under ``tmp``."""
    env = dict(os.environ, HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "cache"))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _sqe(tmp: Path, *args: str, cwd: Path | None = None,
         timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "sqe"), *args], cwd=cwd or tmp, env=_env(tmp),
                          capture_output=True, text=True, timeout=timeout)


def _mentioning(text: str) -> list[int]:
    """PIDs of the processes (not this one) whose command line or environment mentions ``text``:
    those a test started with :func:`_env` of its directory, and their children."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if text.encode() in seen and state != "Z":
                found.append(int(entry.name))
    return found


@pytest.fixture
def operator_dir(tmp_path) -> Iterator[Path]:
    """A temporary directory for one test; processes left that name it are killed (by PID)."""
    (tmp_path / "home").mkdir()
    yield tmp_path
    for pid in _mentioning(str(tmp_path)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start(tmp: Path, data: str, cwd: Path | None = None) -> tuple[subprocess.Popen, Path,
                                                                    int, int]:
    """``sqe services`` on two free ports, once services.json names both services."""
    kafka, rds = free_port(), free_port()
    out = open(tmp / "services.out", "w")
    proc = subprocess.Popen([str(BIN / "sqe"), "services", "--kafka-port", str(kafka),
                             "--redis-port", str(rds), "--data-dir", data], cwd=cwd or tmp,
                            env=_env(tmp), stdout=out, stderr=subprocess.STDOUT)
    out.close()
    state = (cwd or tmp) / data / "services.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / "services.out").read_text()
        if state.is_file() and "running" in (tmp / "services.out").read_text():
            return proc, state, kafka, rds
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"sqe services did not start: {(tmp / 'services.out').read_text()}")


def _readme_block() -> list[str]:
    """The lines of the docs/running.md sh block that runs ``sqe services &``."""
    text = (ROOT / "docs" / "running.md").read_text()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "sqe services &" in b]
    assert len(blocks) == 1, "docs/running.md's sqe services block moved"
    return blocks[0].splitlines()


def _on_ports(lines: list[str], kafka: int, rds: int) -> list[str]:
    """The docs' lines with the only substitution they need here: the services on two free
    ports instead of 9092 and 6379 (which other servers may hold on a CI machine)."""
    conf = " ".join(shlex.quote(a) for a in service_conf(f"127.0.0.1:{kafka}",
                                                         f"redis://127.0.0.1:{rds}/0"))
    rules = [(r"sqe services &", f"sqe services --kafka-port {kafka} --redis-port {rds} &"),
             (r"sqe sample-events ", f"sqe sample-events --brokers 127.0.0.1:{kafka} "),
             (r"--config conf/local.yaml", f"--config conf/local.yaml {conf}"),
             (r"^redis-cli ", f"redis-cli -p {rds} ")]
    out = []
    for line in lines:
        for pattern, replacement in rules:
            line = re.sub(pattern, lambda _m, r=replacement: r, line)
        out.append(line)
    for pattern, _ in rules:
        assert any(re.search(pattern, line) for line in lines), f"docs/running.md lost {pattern!r}"
    return out


@pytest.mark.slow
@pytest.mark.spark
def test_the_readme_lines_run_as_written_from_a_fresh_directory(operator_dir):
    """The docs' block from a fresh directory (its first line, the install, is the venv these
    tests run in, linked as .venv; topologies/ and conf/ are linked from the checkout), with
    the services on free ports; the data directory is the default, under XDG_CACHE_HOME."""
    work = operator_dir / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(BIN.parent)
    for name in ("topologies", "conf"):
        (work / name).symlink_to(ROOT / name)
    lines = _readme_block()
    assert lines[0].startswith("python3 -m venv .venv")
    script = "\n".join(["set -e", *_on_ports(lines[1:], free_port(), free_port())])
    with open(operator_dir / "out", "w") as out, open(operator_dir / "err", "w") as err:
        done = subprocess.run(["bash", "-c", script], cwd=work, env=_env(operator_dir),
                              stdout=out, stderr=err, timeout=600)
    stdout, stderr = (operator_dir / "out").read_text(), (operator_dir / "err").read_text()
    assert done.returncode == 0, stdout + stderr
    assert re.search(r"^1000$", stdout, re.M), stdout  # redis-cli hlen load_log
    assert re.search(r"^redis: .*answers PING, AOF on", stdout, re.M), stdout
    assert re.search(r"^kafka: .*running, answers", stdout, re.M), stdout
    assert re.search(r"^stopped sqe services \(pid \d+\), kafka \(pid \d+\), redis", stdout,
                     re.M), stdout
    assert "no persistence" not in stderr and "Traceback" not in stderr, stderr
    data = operator_dir / "cache" / "sqe" / "services"
    assert (data / "redis" / "appendonlydir").is_dir() and not (data / "services.json").exists()
    assert _mentioning(str(operator_dir)) == []


@pytest.mark.parametrize("which", ["--kafka-port", "--redis-port"])
def test_a_taken_port_is_one_sentence_naming_its_holder_and_nothing_starts(operator_dir, which):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = {"--kafka-port": str(free_port()), "--redis-port": str(free_port()),
                 which: str(taken)}
        done = _sqe(operator_dir, "services", *[a for kv in ports.items() for a in kv],
                    "--data-dir", "data")
    name = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: port {taken} is taken by {name} (pid {os.getpid()}); "
                                  f"stop it, or pass "), done.stderr
    assert f"{which} N for another port" in done.stderr
    assert not (operator_dir / "data").exists() and _mentioning(str(operator_dir)) == []


def test_status_and_stop_round_trip_with_the_append_only_file_on(operator_dir):
    proc, state, kafka, rds = _start(operator_dir, "data")
    record = json.loads(state.read_text())
    assert record["pid"] == proc.pid
    assert [(s["name"], s["address"]) for s in record["services"]] == [
        ("kafka", f"127.0.0.1:{kafka}"), ("redis", f"redis://127.0.0.1:{rds}")]
    status = _sqe(operator_dir, "services", "status", "--data-dir", "data")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"sqe services: pid {proc.pid}, running" in status.stdout
    assert re.search(rf"^redis: redis://127.0.0.1:{rds}, pid \d+, running, answers PING, AOF on",
                     status.stdout, re.M), status.stdout
    client = redis.Redis(port=rds)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert persistence_warning(client, "the HWM store") is None
    finally:
        client.close()
    again = _sqe(operator_dir, "services", "--kafka-port", str(free_port()), "--redis-port",
                 str(free_port()), "--data-dir", "data")
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert f"already runs with data in {operator_dir / 'data'} (pid {proc.pid})" in again.stderr

    stop = _sqe(operator_dir, "services", "stop", "--data-dir", "data")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith(f"stopped sqe services (pid {proc.pid}), kafka (pid ")
    assert proc.wait(30) == 0 and not state.exists()
    assert _mentioning(str(operator_dir)) == []
    after = _sqe(operator_dir, "services", "status", "--data-dir", "data")
    assert after.returncode == 1 and after.stdout.startswith("no sqe services run with data in")
    nothing = _sqe(operator_dir, "services", "stop", "--data-dir", "data")
    assert nothing.returncode == 0 and nothing.stdout.startswith("nothing to stop")


def test_a_relative_data_dir_from_another_cwd_and_stop_after_the_sqe_process_died(operator_dir):
    elsewhere = operator_dir / "elsewhere"
    elsewhere.mkdir()
    proc, state, _, rds = _start(operator_dir, "rel/services", cwd=elsewhere)
    data = elsewhere / "rel" / "services"
    assert state == data / "services.json"
    services = json.loads(state.read_text())["services"]
    assert {s["data_dir"] for s in services} == {str(data / "kafka"), str(data / "redis")}
    assert (data / "redis" / "appendonlydir").is_dir()
    proc.kill()  # SIGKILL: its services are left behind, and stop ends them by PID
    proc.wait(10)
    status = _sqe(operator_dir, "services", "status", "--data-dir", str(data))
    assert f"sqe services: pid {proc.pid}, not running" in status.stdout
    assert status.returncode == 0, status.stdout  # the services themselves still run
    stop = _sqe(operator_dir, "services", "stop", "--data-dir", str(data))
    assert stop.returncode == 0 and "kafka (pid" in stop.stdout and "redis (pid" in stop.stdout
    assert not state.exists() and _mentioning(str(operator_dir)) == []


def test_help_names_the_default_data_dir_resolved(operator_dir):
    done = subprocess.run([str(BIN / "sqe"), "services", "--help"], capture_output=True,
                          text=True, env=dict(_env(operator_dir), COLUMNS="500"), timeout=60)
    assert done.returncode == 0
    assert f"here {operator_dir / 'cache' / 'sqe' / 'services'})" in done.stdout
