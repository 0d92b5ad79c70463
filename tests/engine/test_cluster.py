"""The chain on a real Spark standalone cluster whose workers get SQE only from the job:
Spark's "Python Package Management" recipe as its page writes it (the driver's own
virtualenv, ``PYSPARK_PYTHON=./environment/bin/python``, ``spark-submit --archives
sqe-env.tar.gz#environment``), with the archive that ``sqe pack`` makes from the installed
wheel.  While load runs, its worker and executors are SIGKILLed and a new worker joins: every
event reaches the stores once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter

import pytest
import redis
import yaml

from sqe.cli.sample_events import produce_events
from support.spark_cluster import CLIENT_JIT_CONF, clean_env, standalone_cluster
from tests.support import ROOT
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.cluster,
              pytest.mark.slow]

EVENTS = 1200


def _files(tmp, kafka: str, redis_url: str, events: str, enriched: str) -> None:
    enrich = yaml.safe_load((ROOT / "topologies/enrich.yaml").read_text())
    enrich[0]["CreateStream"]["objectName"] = events
    enrich[1]["Query"]["insertInto"]["objectName"] = enriched
    load = yaml.safe_load((ROOT / "topologies/load.yaml").read_text())
    load[0]["CreateStream"]["objectName"] = enriched
    for name, commands in (("enrich", enrich), ("load", load)):
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(commands, sort_keys=False))
    url = redis_url.rsplit("/", 1)
    host, port = url[0].removeprefix("redis://").split(":")
    (tmp / "cluster.yaml").write_text(yaml.safe_dump({"SQE": {
        "jw.sqe.spout.kafka.brokers": [kafka], "jw.sqe.state.kafka.brokers": [kafka],
        "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
        "jw.sqe.state.redis.host": host, "jw.sqe.state.redis.port": int(port),
        "jw.sqe.state.redis.database": int(url[1])}}))


def _submit(installed, cluster, tmp, topology: str, *extra: str, archives: bool = True
            ) -> subprocess.Popen:
    """``spark-submit`` of ``sqe run TOPOLOGY --once`` in client mode, as Spark's page says
    (without ``archives``: with no ``--archives``, which the page's recipe needs)."""
    submit = installed.run("python", "-m", "sqe.cli.submit", "--path", cwd=tmp).stdout.strip()
    env = clean_env(PYSPARK_DRIVER_PYTHON=str(installed.bin("python")),
                    PYSPARK_PYTHON="./environment/bin/python")
    env.pop("SPARK_HOME")  # the driver's own pyspark (the venv's spark-submit) finds its home
    log = open(tmp / f"{topology}.log", "w")
    return subprocess.Popen(
        [str(installed.bin("spark-submit")), "--master", cluster.url,
         *(["--archives", f"{tmp / 'sqe-env.tar.gz'}#environment"] if archives else []),
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
         *CLIENT_JIT_CONF, submit, f"{topology}.yaml", "--config", "cluster.yaml", "--once",
         "--checkpoint", str(tmp / "ck" / topology), "--progress", "lines", *extra],
        cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _finish(proc: subprocess.Popen, tmp, topology: str, timeout: float = 600) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    text = (tmp / f"{topology}.log").read_text(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    return text


def test_the_chain_on_a_standalone_cluster_with_sqe_shipped_as_an_archive_through_a_worker_loss(
        installed_sqe, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    # the workers' Python has no SQE: they get it only through the archive
    bare = subprocess.run(["python3", "-c", "import sqe"], cwd=tmp_path, env=clean_env(),
                          capture_output=True)
    assert bare.returncode != 0

    packed = installed_sqe.run("sqe", "pack", "-o", "sqe-env.tar.gz", cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr
    assert "--archives" in packed.stdout and (tmp_path / "sqe-env.tar.gz").is_file()

    events, enriched = kafka_topic(2, "events"), kafka_topic(2, "enriched")
    produce_events(kafka_bootstrap, events, EVENTS, partitions=2)
    _files(tmp_path, kafka_bootstrap, redis_url, events, enriched)
    store = redis.Redis.from_url(redis_url, decode_responses=True)
    with standalone_cluster(tmp_path / "spark", workers=1) as cluster:
        # the archive forgotten: the executors' Python is not there, which is one sentence
        forgot = _submit(installed_sqe, cluster, tmp_path, "enrich", archives=False)
        assert forgot.wait(300) == 1
        said = (tmp_path / "enrich.log").read_text().strip().splitlines()[-1]
        assert said.startswith("error: enrich.yaml: Spark could not start the Python worker "
                               "./environment/bin/python (looked for in the executors' working "
                               "directories: No such file or directory); "), said
        assert "--archives sqe-env.tar.gz#environment" in said, said
        assert read_topic(kafka_bootstrap, enriched) == []

        out = _finish(_submit(installed_sqe, cluster, tmp_path, "enrich"), tmp_path, "enrich")
        assert f"enrich: 1 batch(es), {EVENTS} records read" in out, out[-2000:]
        assert len(read_topic(kafka_bootstrap, enriched)) == EVENTS
        assert not (tmp_path / "environment").exists()  # the driver's bridge is gone

        load = _submit(installed_sqe, cluster, tmp_path, "load",
                       "--conf", "jw.sqe.spout.kafka.maxRecordsPerBatch=250")
        deadline = time.monotonic() + 300
        while int(store.get("sqe:{load.Enriched}:batch") or -1) < 1:  # two batches committed
            assert load.poll() is None, (tmp_path / "load.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "load committed no batch in 300 s"
            time.sleep(0.5)
        cluster.workers[0].kill()  # the worker, its executor JVM and their Python workers
        cluster.start_worker()
        _finish(load, tmp_path, "load")
    # load's executor ran on the new worker too, from the archive unpacked there
    assert list((tmp_path / "spark" / "work1").glob("app-*/*/environment/bin/python"))
    loaded = Counter(store.hgetall("load_log").values())
    assert len(loaded) == EVENTS and set(loaded.values()) == {1}, (
        f"{EVENTS - len(loaded)} events missing, "
        f"{sum(1 for n in loaded.values() if n > 1)} doubled")
    by_region = [e for k in store.keys("*") if not k.startswith("sqe:") and k != "load_log"
                 for e in store.hkeys(k)]
    assert sorted(by_region) == sorted(loaded)
    assert store.keys("sqe:*:stage:*") == []
    batches = [json.loads(line) for line in (tmp_path / "ck" / "load" / "sqe-progress.jsonl")
               .read_text().splitlines()]
    assert sum(b["records_read"] for b in batches) >= EVENTS and len(batches) >= 5
