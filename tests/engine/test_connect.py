"""The chain over Spark Connect: `sqe run --remote sc://...` from a client process with no
Java on its PATH, against a real Spark Connect server that the fixtures start, with the same
exactly-once results as classic mode, through a server SIGKILLed mid-run and started again,
then a client SIGKILLed mid-run; a hop (examples/pyspark_chain.py) whose server is restarted
under it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import sqe
from sqe.cli.sample_events import produce_events
from sqe.errors import PrerequisiteError
from sqe.faults import kill_group
from support.connect_server import ConnectServer, start_connect_server
from tests.engine.test_exactly_once import Chain, _assert_each_event_once
from tests.engine.test_hop import pyspark_chain
from tests.support import ROOT
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.postgres,
              pytest.mark.connect]

EVENTS = 2000


def no_java_env() -> dict[str, str]:
    """The environment of a client machine without Java: PATH holds only the virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = str(Path(sys.executable).parent)
    return env


class RemoteChain(Chain):
    """The chain's `sqe run` processes, as Spark Connect clients of ``url``."""

    def __init__(self, url: str, *args) -> None:
        super().__init__(*args)
        self.url = url

    def command(self, name: str, checkpoint: str | None = None, *extra: str) -> list[str]:
        return [*super().command(name, checkpoint, *extra), "--remote", self.url]

    def run(self, name: str, *extra: str, checkpoint: str | None = None
            ) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(name, checkpoint, *extra), capture_output=True,
                              text=True, timeout=900, env=no_java_env())

    def start(self, name: str, *extra: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")
        return subprocess.Popen(self.command(name, None, *extra), stdout=log,
                                stderr=subprocess.STDOUT, env=no_java_env(),
                                start_new_session=True)


def _chain(connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path
           ) -> tuple[RemoteChain, set[str]]:
    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    chain = RemoteChain(connect_server.url, tmp_path, kafka_bootstrap, events, enriched,
                        redis_url, postgres_dsn)
    produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
    return chain, {f"e{i}" for i in range(EVENTS)}


def _wait_for_commit(store: redis.Redis, batch: int, proc: subprocess.Popen, log: Path,
                     consumer: str = "load.Enriched") -> None:
    deadline = time.monotonic() + 300
    while int(store.get(f"sqe:{{{consumer}}}:batch") or -1) < batch:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"load committed no batch {batch} in 300 s"
        time.sleep(0.2)


@pytest.mark.slow
def test_the_chain_over_spark_connect_from_a_client_without_java(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    chain, expected = _chain(connect_server, kafka_bootstrap, kafka_topic, redis_url,
                             postgres_dsn, tmp_path)
    assert shutil.which("java", path=no_java_env()["PATH"]) is None
    done = chain.run("enrich")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Spark Connect session with {connect_server.url}" in done.stderr
    assert "Events batch 0: 2000 records read" in done.stderr  # the server's batch, reported
    assert len(read_topic(kafka_bootstrap, chain.enriched)) == EVENTS
    done = chain.run("load", "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=700")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "load: 3 batch(es), 2000 records read" in done.stdout, done.stdout
    _assert_each_event_once(chain, expected)
    # the operator's commands from the same client: no Spark session, no Java
    run_args = Chain.command(chain, "load")[4:]  # the topology file and the run's options
    run_args.remove("--once")
    status = subprocess.run([sys.executable, "-m", "sqe.cli.main", "status", *run_args,
                             "--json"], capture_output=True, text=True, timeout=300,
                            env=no_java_env())
    assert status.returncode == 0, status.stderr[-3000:]
    (stream,) = json.loads(status.stdout)["streams"]
    assert stream["backlog"] == 0 and stream["problems"] == []
    assert [b["batch_id"] for b in stream["last_batches"]] == [0, 1, 2]
    report = subprocess.run([sys.executable, "-m", "sqe.cli.main", "report", "--json",
                             str(tmp_path / "load")], capture_output=True, text=True,
                            timeout=300, env=no_java_env())
    assert report.returncode == 0, report.stderr[-3000:]
    (summary,) = json.loads(report.stdout)["streams"]
    assert (summary["batches"], summary["records_read"]) == (3, EVENTS), summary


@pytest.mark.slow
def test_the_server_and_then_a_client_killed_mid_run_lose_and_double_nothing(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    server = start_connect_server(tmp_path / "server")
    try:
        chain, expected = _chain(server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn,
                                 tmp_path)
        assert chain.run("enrich").returncode == 0
        store = redis.Redis.from_url(redis_url)
        batch = ("--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=300")
        log = tmp_path / "load.log"
        # 1. the server's JVM, its Python workers and its foreachBatch process die mid-run
        load = chain.start("load", *batch)
        _wait_for_commit(store, 1, load, log)
        server.kill()
        assert load.wait(300) == 1
        said = log.read_text().strip().splitlines()[-1]
        assert said.startswith("error: "), said
        assert "the Spark Connect server stopped answering" in said, said
        assert "Traceback" not in log.read_text()
        # 2. the server is back; the next client is SIGKILLed mid-run: its query on the server
        # lives on until the next run replaces it
        server = start_connect_server(tmp_path / "server", port=server.port)
        load = chain.start("load", *batch)
        _wait_for_commit(store, 3, load, log)
        os.killpg(load.pid, 9)
        load.wait(30)
        done = chain.run("load", *batch)
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_each_event_once(chain, expected)
    finally:
        server.kill()


#: A Spark Connect client that makes a call, says "ready", and makes the next when the file
#: argv[2] exists: what sqe.Hop.explain says of its failure.
_BETWEEN_CALLS = """
import pathlib, sys, time
from pyspark.sql import SparkSession
import sqe
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.range(1).collect()
print("ready", flush=True)
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.2)
try:
    spark.range(1).collect()
except Exception as exc:
    print(sqe.Hop.explain(exc))
"""


@pytest.mark.slow
def test_a_server_restarted_under_a_hop_ends_its_run_in_one_sentence_and_the_next_goes_on(
        kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    # the server is back within the client's retries: pyspark says only that the session is
    # not found ("[RESPONSE_ALREADY_RECEIVED] INVALID_HANDLE.SESSION_NOT_FOUND ..."), the hop
    # says what happened and what the next run does
    server, idle, load = start_connect_server(tmp_path / "server"), None, None
    try:
        chain = pyspark_chain(tmp_path, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn,
                              EVENTS)
        remote = ("--remote", server.url)
        assert chain.run("enrich", *remote).returncode == 0
        log = tmp_path / "load.log"
        with open(log, "w") as out:
            load = subprocess.Popen(
                chain.command("load", None, *remote,
                              "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=200"),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        idle = subprocess.Popen([sys.executable, "-c", _BETWEEN_CALLS, server.url,
                                 str(tmp_path / "go")], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert idle.stdout is not None and idle.stdout.readline() == "ready\n"
        _wait_for_commit(redis.Redis.from_url(redis_url), 1, load, log, "load.enriched")
        server.kill()
        server = start_connect_server(tmp_path / "server", port=server.port)
        (tmp_path / "go").touch()
        assert load.wait(600) == 1
        said = log.read_text().strip().splitlines()[-1]
        assert said.startswith("error: the Spark Connect server no longer holds this run's "
                               "session (INVALID_HANDLE.SESSION_"), log.read_text()[-3000:]
        assert said.endswith("so the run ended with it; what its batches committed stays "
                             "committed, and the next run continues from the checkpoint"), said
        assert "Traceback" not in log.read_text()
        # a client between two calls: pyspark closes itself on SESSION_CHANGED, then says
        # only "[NO_ACTIVE_SESSION] No active Spark session found."
        assert idle.communicate(timeout=600)[0].startswith(
            "the Spark Connect client closed this run's session (NO_ACTIVE_SESSION: its server "
            "was restarted under it, or the session was stopped), so the run ended with it")
        done = chain.run("load", *remote)
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_each_event_once(chain, {f"e{i}" for i in range(EVENTS)})
    finally:
        server.kill()
        for proc in (idle, load):
            if proc is not None and proc.poll() is None:
                kill_group(proc)  # the process group: a hop's driver and its JVM too


def _hello_on_a_server(tmp_path: Path, python: str
                       ) -> tuple[ConnectServer, subprocess.CompletedProcess]:
    """``sqe run topologies/hello.yaml --once`` against a server of its own whose Python
    workers run ``python``; the server is stopped after the run."""
    server = start_connect_server(tmp_path / "server", python=python)
    try:
        return server, subprocess.run(
            [sys.executable, "-m", "sqe.cli.main", "run", str(ROOT / "topologies/hello.yaml"),
             "--once", "--checkpoint", str(tmp_path / "ck"), "--remote", server.url],
            capture_output=True, text=True, timeout=300, env=no_java_env())
    finally:
        server.kill()


def test_a_server_whose_python_lacks_sqe_is_one_sentence(tmp_path):
    bare = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else shutil.which("python3")
    assert bare and subprocess.run([bare, "-c", "import sqe"], cwd=tmp_path,
                                   capture_output=True).returncode != 0
    server, done = _hello_on_a_server(tmp_path, bare)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: the Spark Connect server at {server.url} runs Python workers that cannot "
        f"import sqe (No module named 'sqe'): install sqe-spark {sqe.__version__} where the "
        "server's and its executors' Python are (a cluster library, or the server started with "
        "PYSPARK_PYTHON pointing at an environment that has it; docs/connect.md)"), done.stderr


def test_a_foreachbatch_python_slower_than_spark_waits_is_started_again(tmp_path):
    # the server's Python takes longer than Spark's fixed 10 s to connect back the first time
    # a query's foreachBatch process starts (as on a busy server), and at once after that
    slow = tmp_path / "slow-python"
    slow.write_text(f"""#!/bin/sh
case "$*" in *foreach_batch*)
  if [ ! -e {tmp_path}/slowed ]; then touch {tmp_path}/slowed; sleep 12; fi;;
esac
exec {sys.executable} "$@"
""")
    slow.chmod(0o755)
    _, done = _hello_on_a_server(tmp_path, str(slow))
    assert (tmp_path / "slowed").exists()
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("warning: hello.Greetings: the server's Python process for foreachBatch did not "
            "connect back within Spark's 10 s (a busy server); starting the query again (2 of "
            "3)") in done.stderr, done.stderr


@pytest.mark.slow
def test_sigterm_stops_the_query_on_the_server_too(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path):
    chain, _ = _chain(connect_server, kafka_bootstrap, kafka_topic, redis_url, postgres_dsn,
                      tmp_path)
    assert chain.run("enrich").returncode == 0
    store = redis.Redis.from_url(redis_url)
    endless = [a for a in chain.command("load") if a != "--once"]
    log = tmp_path / "endless.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(endless, stdout=out, stderr=subprocess.STDOUT,
                                env=no_java_env(), start_new_session=True)
    _wait_for_commit(store, 0, proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 143, log.read_text()[-3000:]
    assert "sqe: load stopped: Enriched after batch" in log.read_text()
    committed = int(store.get("sqe:{load.Enriched}:batch"))
    produce_events(kafka_bootstrap, chain.events, 50, partitions=2, start=EVENTS)
    assert chain.run("enrich").returncode == 0  # 50 more records in enriched
    time.sleep(8)  # an orphaned query on the server would read and commit them by now
    assert int(store.get("sqe:{load.Enriched}:batch")) == committed


def test_a_checkpoint_the_client_cannot_read_is_refused_in_one_sentence(connect_server, tmp_path):
    done = subprocess.run([sys.executable, "-m", "sqe.cli.main", "run",
                           str(ROOT / "topologies/hello.yaml"), "--once", "--checkpoint",
                           "s3a://bucket/sqe/hello", "--remote", connect_server.url],
                          capture_output=True, text=True, timeout=300, env=no_java_env(),
                          cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: {ROOT / 'topologies/hello.yaml'}: checkpoint s3a://bucket/sqe/hello: over "
        "Spark Connect, the checkpoint must be a path that this machine and the server "
        "share"), done.stderr


def test_a_connect_url_s_token_is_never_said():
    from sqe.engine.spark.connect_session import _reachable

    with pytest.raises(PrerequisiteError) as unreachable:
        _reachable("sc://127.0.0.1:1/;token=dapi-secret", timeout=1)
    assert "dapi-secret" not in str(unreachable.value) and "token=***" in str(unreachable.value)


_HOP_FAILING = """
import sys
from urllib.parse import urlsplit

import sqe
from pyspark.sql import SparkSession

url, brokers, topic, redis_url, checkpoint = sys.argv[1:]
redis_at = urlsplit(redis_url)
spark = SparkSession.builder.remote(url).getOrCreate()
hop = sqe.Hop("wrong.events", topic=topic, checkpoint=checkpoint, conf={
    "jw.sqe.spout.kafka.brokers": brokers, "jw.sqe.spout.kafka.startingOffsets": "earliest"},
    into=[sqe.InsertInto(objectName="log", stateName="REDIS",
                         fields=["_partition", "_offset", "_value"],
                         options={"jw.sqe.state.redis.host": redis_at.hostname,
                                  "jw.sqe.state.redis.port": redis_at.port,
                                  "jw.sqe.state.redis.datatype": "HASH",
                                  "jw.sqe.state.redis.keyname.fields": ["_partition"],
                                  "jw.sqe.state.redis.fieldname.fields": ["_offset"]})])
query = (hop.read(spark).writeStream.option("checkpointLocation", hop.checkpoint)
         .foreachBatch(hop.exactly_once(lambda rows, batch: batch.write("nowhere", rows)))
         .trigger(availableNow=True).start())
sqe.Hop.await_termination(query, 240)
"""


def test_a_hop_failing_on_the_server_ends_with_sqe_s_class_and_sentence(
        connect_server, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    topic = kafka_topic(1, "events")
    produce_events(kafka_bootstrap, topic, 3, partitions=1)
    done = subprocess.run(
        [sys.executable, "-c", _HOP_FAILING, connect_server.url, kafka_bootstrap, topic,
         redis_url, str(tmp_path / "ck")], capture_output=True, text=True, timeout=600,
        env=no_java_env())
    assert done.returncode == 1, done.stderr[-3000:]
    # the traceback ends with SQE's class and its one sentence, and holds no trace of Spark's
    # or of the server's Python worker
    assert done.stderr.strip().splitlines()[-1] == (
        "sqe.errors.StateError: hop wrong.events: it has no state nowhere (its states: log); "
        "name each state in the hop's into=[...]"), done.stderr[-3000:]
    assert "StreamingQueryException" not in done.stderr and "py4j" not in done.stderr
