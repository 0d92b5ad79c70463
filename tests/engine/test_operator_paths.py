"""The paths an operator takes around a run, through the real `sqe` command: a new checkpoint for
a name whose stores hold commits, following each printed hint literally, `sqe reset`, two runs on
one checkpoint, and stopping with SIGINT/SIGTERM.  Every store is checked after each step: the
HWM store, a Redis aggregate state, a Redis hash state and a Postgres table must agree and hold
every event exactly once (or, after a deliberate reset, exactly twice)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import redis
import yaml

from sqe.cli.local_services import service_conf
from sqe.wire.keys import StreamMetadata
from tests.support import ROOT
from tests.support.kafka_io import produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.postgres]

REGIONS = ("EU", "US")


def _topology(path: Path, topic: str) -> Path:
    load = yaml.safe_load((ROOT / "topologies/load.yaml").read_text())
    load[0]["CreateStream"]["objectName"] = topic
    load.append({"Query": {  # an aggregate merged by batch id: applied twice would show
        "insertInto": {"objectName": "totals", "stateName": "REDIS",
                       "stateType": "TRANSACTIONAL", "fields": ["region", "cents"],
                       "options": {"jw.sqe.state.redis.datatype": "STRING"}},
        "select": {"expressions": ["region", {"Sum": ["amount_cents"]}]},
        "from": {"objectName": "Enriched"}}})
    load.append({"Query": {
        "insertInto": {"objectName": "loaded", "stateName": "POSTGRES",
                       "fields": ["event_id", "amount_cents"]},
        "select": {"expressions": ["event_id", "amount_cents"]},
        "from": {"objectName": "Enriched"}}})
    path.write_text(yaml.safe_dump(load, sort_keys=False))
    return path


def _events(kafka: str, topic: str, first: int, count: int) -> None:
    """Events ``first`` .. ``first + count - 1``, keyed as an upstream topology writes them."""
    produce(kafka, topic, [
        (StreamMetadata(77, 0, i).to_bytes(),
         json.dumps({"event_id": f"e{i}", "region": REGIONS[i % 2], "amount_cents": i}).encode(),
         0) for i in range(first, first + count)])


class Cli:
    """`sqe` run as a user runs it, from a directory of its own."""

    def __init__(self, tmp: Path, kafka: str, redis_url: str, dsn: str, topology: Path) -> None:
        self.tmp, self.redis_url, self.dsn = tmp, redis_url, dsn
        self.args = [str(topology), "--config", str(ROOT / "conf/local.yaml"),
                     *service_conf(kafka, redis_url, dsn), "--name", "load"]

    def _argv(self, words: list[str]) -> list[str]:
        assert words[0] == "sqe", words
        return [sys.executable, "-m", "sqe.cli.main", *words[1:]]

    def run(self, *words: str) -> subprocess.CompletedProcess:
        return subprocess.run(self._argv(list(words)), capture_output=True, text=True,
                              cwd=self.tmp, timeout=900)

    def sqe_run(self, *extra: str) -> subprocess.CompletedProcess:
        return self.run("sqe", "run", *self.args, "--once", *extra)

    def start(self, *extra: str) -> tuple[subprocess.Popen, Path]:
        """`sqe run` until stopped, in the background; the process and its log."""
        log = self.tmp / f"run-{time.monotonic_ns()}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(self._argv(["sqe", "run", *self.args, *extra]),
                                    cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT, text=True)
        return proc, log

    def follow(self, hint: str) -> subprocess.CompletedProcess:
        """Run a command printed by sqe exactly as printed."""
        return self.run(*shlex.split(hint))

    def stores(self) -> dict:
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            log = Counter(client.hgetall("load_log").values())
            totals = {r: json.loads(client.get(f"totals:{r}:cents") or "[0, 0, 0]")[2]
                      for r in REGIONS}
            stages = client.keys("sqe:*:stage:*")
        finally:
            client.close()
        with psycopg.connect(self.dsn) as conn:
            rows = Counter(r[0] for r in conn.execute("SELECT event_id FROM loaded"))
        return {"log": log, "totals": totals, "postgres": rows, "stages": stages}


def _once_each(stores: dict, n: int, times: int = 1) -> None:
    expected = Counter({f"e{i}": times for i in range(n)})
    assert stores["postgres"] == expected, "Postgres"
    assert stores["log"] == Counter({f"e{i}": 1 for i in range(n)}), "load_log"
    assert stores["totals"] == {r: times * sum(i for i in range(n) if REGIONS[i % 2] == r)
                                for r in REGIONS}, "totals"
    assert stores["stages"] == []


def _hints(stderr: str) -> list[str]:
    return re.findall(r"`(sqe [^`]+)`", stderr)


@pytest.fixture
def cli(kafka_bootstrap, kafka_topic, redis_url, postgres_dsn, tmp_path) -> Cli:
    topic = kafka_topic(1, "enriched")
    cli = Cli(tmp_path, kafka_bootstrap, redis_url, postgres_dsn,
              _topology(tmp_path / "load.yaml", topic))
    cli.kafka, cli.topic = kafka_bootstrap, topic  # type: ignore[attr-defined]
    return cli


@pytest.mark.slow
def test_a_new_checkpoint_stops_the_run_and_each_printed_way_out_is_exact(cli):
    _events(cli.kafka, cli.topic, 0, 30)
    first = cli.sqe_run("--checkpoint", "ck1")
    assert first.returncode == 0, first.stderr
    _once_each(cli.stores(), 30)

    _events(cli.kafka, cli.topic, 30, 20)
    lost = cli.sqe_run("--checkpoint", "ck2")  # the checkpoint was lost: a new, empty one
    assert lost.returncode == 1 and "Traceback" not in lost.stderr
    assert "ck2/Enriched has no batch yet, but consumer 'load.Enriched' has committed batch 0" \
        in lost.stderr
    _once_each(cli.stores(), 30)  # nothing was read
    resume, old = _hints(lost.stderr)
    assert resume.endswith(f"--checkpoint {cli.tmp / 'ck2'} --once --resume-from-store")
    assert old.endswith(f"--checkpoint {cli.tmp / 'ck1'} --once"), lost.stderr

    followed = cli.follow(old)  # way out 1: the checkpoint that made those commits
    assert followed.returncode == 0, followed.stderr
    _once_each(cli.stores(), 50)

    _events(cli.kafka, cli.topic, 50, 25)
    lost = cli.sqe_run("--checkpoint", "ck3")
    assert lost.returncode == 1
    (resume, old) = _hints(lost.stderr)
    followed = cli.follow(resume)  # way out 2: resume from the stores on the new checkpoint
    assert followed.returncode == 0, followed.stderr
    assert "resuming from what its stores committed: batch 2 reads from offsets" in followed.stderr
    _once_each(cli.stores(), 75)
    again = cli.sqe_run("--checkpoint", "ck3")  # the resumed checkpoint goes on by itself
    assert again.returncode == 0, again.stderr
    _once_each(cli.stores(), 75)


@pytest.mark.slow
def test_an_hwm_store_that_forgot_its_marks_stops_the_run_and_the_printed_way_on_is_exact(cli):
    _events(cli.kafka, cli.topic, 0, 20)
    first = cli.sqe_run("--checkpoint", "ck1")
    assert first.returncode == 0, first.stderr
    client = redis.Redis.from_url(cli.redis_url)
    try:  # the store forgets: its marks and commit record of the consumer are gone
        forgot = client.keys("sqe:{load.Enriched}:*")
        assert forgot and client.delete(*forgot) == len(forgot)
    finally:
        client.close()
    _events(cli.kafka, cli.topic, 20, 10)
    refused = cli.sqe_run("--checkpoint", "ck1")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "holds no batch, but the checkpoint's progress file" in refused.stderr
    assert "so replays of the records of batch 0 would pass the replay filter, and the run " \
        "stops before reading anything" in refused.stderr
    _once_each(cli.stores(), 20)  # nothing was read
    rebuild, accept = _hints(refused.stderr)
    assert accept.endswith("--checkpoint ck1 --once --accept-lost-marks 0"), refused.stderr
    assert rebuild.startswith("sqe hwm rebuild ") and rebuild.endswith("--checkpoint ck1")
    asks = cli.follow(rebuild)  # not at a terminal: it shows what it found and asks for --yes
    assert asks.returncode == 2 and "confirm with --yes" in asks.stderr, asks.stderr
    assert "load.Enriched: its HWM store holds no batch, the checkpoint's last is batch 0" \
        in asks.stdout and "20 records of" in asks.stdout
    followed = cli.follow(rebuild + " --yes")
    assert followed.returncode == 0, followed.stderr
    assert "load.Enriched: committed batch 0 with 1 high-water mark(s)" in followed.stdout
    _events(cli.kafka, cli.topic, 0, 20)  # replays of batch 0's records: dropped again
    again = cli.sqe_run("--checkpoint", "ck1")
    assert again.returncode == 0 and "lost the commits" not in again.stderr, again.stderr
    _once_each(cli.stores(), 30)


@pytest.mark.slow
def test_reset_asks_first_resets_every_store_and_never_reuses_a_batch_id(cli):
    _events(cli.kafka, cli.topic, 0, 20)
    assert cli.sqe_run("--checkpoint", "ck1").returncode == 0
    reset = ["sqe", "reset", *cli.args]
    refused = cli.run(*reset)  # not at a terminal: it does not ask, it refuses
    assert refused.returncode == 2 and "confirm with --yes" in refused.stderr
    assert "HWM store at" in refused.stdout and "Postgres state loaded" in refused.stdout
    assert "Redis state totals" in refused.stdout
    done = cli.run(*reset, "--yes")
    assert done.returncode == 0, done.stderr
    # Starting over reads everything again: every store gets it once more, none skips it (the
    # batch ids go on after the stored ones, so the aggregates' ids never come again).
    rerun = cli.sqe_run("--checkpoint", "ck2")
    assert rerun.returncode == 0, rerun.stderr
    _once_each({**cli.stores(), "log": Counter({f"e{i}": 1 for i in range(20)})}, 20, times=2)


def _wait_for(predicate, what: str, proc: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert proc.poll() is None, f"the run ended while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_run_per_checkpoint_and_a_signal_stops_it_cleanly(cli, sig, code):
    _events(cli.kafka, cli.topic, 0, 40)
    ck = cli.tmp / "ck"
    proc, log = cli.start("--checkpoint", "ck")
    try:
        _wait_for(lambda: (ck / "Enriched" / "commits" / "0").exists(), "first batch", proc)
        started = time.monotonic()
        second = cli.sqe_run("--checkpoint", "ck")
        assert time.monotonic() - started < 10, "the second run did not refuse at once"
        assert second.returncode == 1 and "Traceback" not in second.stderr
        assert re.search(rf"checkpoint {re.escape(str(ck))} is in use by the run of PID "
                         rf"{proc.pid} on \S+ since \S+; one run at a time", second.stderr)
        proc.send_signal(sig)
        assert proc.wait(120) == code
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text and "py4j" not in text.lower(), text[-3000:]
    assert text.strip().splitlines()[-1] == (
        'sqe: load stopped: Enriched after batch 0 (the next run starts at offsets {"0": 40})')
    assert not (ck / "sqe-run.lock").exists()
    _once_each(cli.stores(), 40)
    if sig != signal.SIGINT:
        return
    # A lock its holder left behind (a dead PID on this host) is taken over.
    (ck / "sqe-run.lock").write_text(json.dumps({"host": os.uname().nodename, "pid": 2**22 + 7,
                                                 "since": "2026-01-01T00:00:00+00:00",
                                                 "heartbeat": 0}))
    _events(cli.kafka, cli.topic, 40, 10)
    again = cli.sqe_run("--checkpoint", "ck")
    assert again.returncode == 0, again.stderr
    _once_each(cli.stores(), 50)
