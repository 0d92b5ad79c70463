"""The whole chain and its parts, each a whole process, against plain programs doing the same.

    python bench/chain.py [--events 200000,1000000] [--repeat 2] [--empty-batches 30] [--idle-run]
                          [--quix-python PATH] [--no-connect | --remote sc://HOST:PORT]
                          [--brokers HOST:PORT]
                          [--redis redis://HOST:PORT/DB] [--json]

One run, every contender a subprocess started from scratch, interleaved (A B A B, the order
rotated each repetition), each one's output checked, medians of ``--repeat`` per size:

1. **chain**: ``sqe run --once`` of the shipped ``topologies/enrich.yaml`` and then of
   ``topologies/load.yaml`` (copies pointed at fresh topics, ``--config conf/local.yaml`` and
   ``--conf`` pairs for the services, a unique ``--name`` each time) against
   ``bench/plain_chain.py`` (confluent-kafka, redis-py, json and struct only) doing the same two
   steps.  Check, for both: the Redis hashes of load.yaml hold exactly what the sample events
   give (``events_by_region``: one hash per upper-cased region, every event_id once with its
   amount_cents; ``load_log``: one field per event, every event_id once) and the enriched topic
   holds one record per event.  Redis is flushed before each contender.
2. **enrich vs quixstreams exactly-once**: the chain's ``sqe run --once`` of enrich.yaml (the
   same process as in 1, run on its own) against ``bench/quix_enrich.py``, a quixstreams 3
   ``Application(processing_guarantee="exactly-once")`` doing the same transform, run by
   ``--quix-python`` (default: this interpreter).  Check: a ``read_committed`` consumer counts
   one record per event in its output topic.  Without quixstreams the row is skipped, saying why.
   quixstreams 3 pins confluent-kafka below 2.13 (and pydantic below 2.14): installed next to
   SQE it downgrades them, so give it a virtualenv of its own (``python -m venv /tmp/quix &&
   /tmp/quix/bin/pip install 'quixstreams>=3,<4'``, then ``--quix-python /tmp/quix/bin/python``).
3. **Spark read vs raw consumer**: ``bench/chain_parts.py spark-read`` (the ``sqe-kafka`` source
   in a Spark streaming query, AvailableNow, batches of up to 1,000,000 records, counting rows)
   against ``raw-read`` (one confluent-kafka consumer over the same range), both over the events
   topic.  Check: both count every record.
4. **Kafka state write vs a bare idempotent producer**: ``chain_parts.py state-write``
   (``sqe.state.kafka.sink.write_kafka`` under Spark, as ``bench/kafka_write.py`` runs it) against
   ``idempotent-write`` (one ``enable.idempotence=true`` producer), the same ``--events``
   records of ``kafka_write.make_records``.  Check: each topic holds every record.
5. **Spark Connect vs classic**: the chain of 1 with ``sqe run --remote sc://...`` against a
   Spark Connect server this run starts (pyspark's ``start-connect-server.sh``, ``local[2]``, its
   Python workers this interpreter; or the one ``--remote`` names) against the classic chain
   of 1 (the same runs).  Check: as
   in 1.  The Connect hop per batch: the empty micro-batch run of 6 over Connect, its seconds
   per batch minus the classic run's.  ``--no-connect`` leaves the row out.
6. **Fixed costs and memory** of ``sqe run``:
   * *empty micro-batch*: ``sqe run --once`` of load.yaml, with
     ``maxRecordsPerBatch`` = one record per partition, over a topic holding the same key
     ``--empty-batches`` + 1 times per partition: the first batch passes one record per
     partition, every later batch reads replays only and writes no row; seconds per batch =
     median time between the starts of those batches (and their median duration);
   * *idle run* (``--idle-run``): ``sqe run --once`` of load.yaml again on the first chain's
     checkpoint, with nothing new (its whole process);
   * *time to the first batch*: process start of each chain ``sqe run`` to the ``started`` time
     of its first batch in ``<checkpoint>/sqe-progress.jsonl`` (median over all of them);
   * *peak RSS* of the load step's process tree, sampled every 0.2 s from ``/proc``: the Python
     driver (the ``sqe run`` process), the JVM, and Spark's Python workers (the Python processes
     under the JVM: the largest one, and all of them together); the worker's is also given per
     1,000,000 records of the largest batch.

Ratios are SQE / other for throughput (the other's time over SQE's: higher is better); "work
ratio" is the same over each contender's own clock of its work (batches, the consume loop),
without process start-up.  Targets: chain >= 0.5x at 1,000,000 events (>= 0.25x from 200,000),
enrich >= 1.0x quixstreams at 1,000,000, Spark read >= 0.8x, Kafka write >= 0.8x, Connect
>= 0.8x of classic, empty
micro-batch <= 0.3 s, Python worker <= 300 MB per 1,000,000 records in a batch (judged for
batches of at least 1,000,000).  A missed target is reported, never a failure: the command exits
1 only when an output check fails (or a contender fails), with one ``error: ...`` line each.

A local pip broker and a redis-server are started unless ``--brokers`` / ``--redis`` are given
(the Redis database given is flushed, many times).  The machine the numbers come from is
usually shared: read the ratios of one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_write import BenchError, create_topic
from local_redis import local_services

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' server starter
from sqe.errors import SqeError
from tests.support.connect_server import start_connect_server

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PARTITIONS = 4
MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")
CONTENDERS = {"chain": ("sqe", "plain"), "enrich": ("sqe", "quix"),
              "read": ("spark-read", "raw-read"), "write": ("state-write", "idempotent-write"),
              "connect": ("sqe-connect", "sqe")}
LABELS = {"chain": "chain: enrich + load vs plain program",
          "enrich": "enrich vs quixstreams exactly-once",
          "read": "Spark read (sqe-kafka) vs raw consumer",
          "write": "Kafka state write vs idempotent producer",
          "connect": "chain over Spark Connect vs classic"}
OTHER = {"chain": "plain", "enrich": "quix EOS", "read": "raw", "write": "idempotent",
         "connect": "classic"}
EMPTY_TARGET_S = 0.3
WORKER_TARGET_MB = 300.0


def target(row: str, events: int) -> float | None:
    """The lowest acceptable ratio SQE / other of ``row`` at ``events`` (None: no target)."""
    if row == "chain":
        return 0.5 if events >= 1_000_000 else 0.25 if events >= 200_000 else None
    if row == "enrich":
        return 1.0 if events >= 1_000_000 else None
    return 0.8  # read, write, connect


# -- processes ---------------------------------------------------------------------------------


@dataclass
class Peaks:
    """Peak RSS (bytes) of a process tree, by kind of process."""

    driver: int = 0  # the root process
    jvm: int = 0  # the java processes under it
    worker: int = 0  # the largest Python process under the JVM
    workers: int = 0  # all Python processes under the JVM together
    tree: int = 0  # everything
    samples: int = 0

    def mb(self) -> dict[str, float]:
        return {k: round(getattr(self, k) / MB, 1) for k in ("driver", "jvm", "worker", "workers",
                                                             "tree")}


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, RSS bytes) of every process, from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        fields = rest.split()
        comm = head.partition("(")[2]
        table[int(entry.name)] = (int(fields[1]), comm, int(fields[21]) * PAGE)
    return table


class TreeSampler:
    """Samples the RSS of a process tree every ``interval`` seconds in a thread."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root, self.interval = root, interval
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        if self.root not in table:
            return
        p = self.peaks
        tree = jvm = workers = worker = 0
        stack = [(self.root, False)]
        while stack:
            pid, under_jvm = stack.pop()
            _, comm, rss = table[pid]
            tree += rss
            is_jvm = comm.startswith("java")
            if is_jvm:
                jvm += rss
            elif under_jvm and comm.startswith("python"):
                workers += rss
                worker = max(worker, rss)
            stack += [(c, under_jvm or is_jvm) for c in children.get(pid, []) if c in table]
        p.driver = max(p.driver, table[self.root][2])
        p.jvm, p.workers = max(p.jvm, jvm), max(p.workers, workers)
        p.worker, p.tree = max(p.worker, worker), max(p.tree, tree)
        p.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join()
        return self.peaks


@dataclass
class Proc:
    """One finished contender process."""

    seconds: float  # wall clock, start to exit
    started: float  # time.time() just before it started
    out: dict[str, Any]  # its last stdout line, when JSON
    peaks: Peaks
    stderr: str


def child_env(tree: Path | None = None) -> dict[str, str]:
    """This tree's code (or ``tree``'s) first on the children's path.  Spark's workers run what
    ``sqe run`` picks (this interpreter, through its local launcher) unless PYSPARK_PYTHON is
    set."""
    path = [str(tree or ROOT),
            *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    # Without PYTHONSAFEPATH, ``python -m`` puts the working directory (this tree) before
    # PYTHONPATH, and another tree's sqe would never be imported.
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path),
            **({"PYTHONSAFEPATH": "1"} if tree is not None else {})}


def run_process(command: list[str], what: str, logs: Path, tree: Path | None = None) -> Proc:
    """Run ``command`` to its end (its output into files under ``logs``), sampling its tree;
    ``tree``: a source tree whose ``sqe`` the command runs instead of this one's."""
    logs.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    out_path, err_path = logs / f"{tag}.out", logs / f"{tag}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.time()
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   env=child_env(tree), cwd=ROOT)
        sampler = TreeSampler(process.pid)
        try:
            code = process.wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            peaks = sampler.stop()
        seconds = time.perf_counter() - start
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    if code != 0:
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        last = (errors or stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BenchError(f"{what} exited {code}: {last.removeprefix('error: ')}")
    last_line = (stdout.strip().splitlines() or [""])[-1]
    try:
        parsed = json.loads(last_line) if last_line.startswith("{") else {}
    except ValueError:
        parsed = {}
    return Proc(seconds, started, parsed, peaks, stderr)


# -- Kafka and Redis helpers -------------------------------------------------------------------


def new_topic(brokers: str, prefix: str, partitions: int = PARTITIONS) -> str:
    """A fresh topic that keeps its records (``retention.ms=-1``)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": brokers, "log_level": 2})
    return create_topic(admin, brokers, partitions, prefix)


def topic_records(brokers: str, topic: str) -> int:
    """Offsets used in ``topic`` (its records, where no transaction wrote to it)."""
    from kafka_write import topic_size

    return int(topic_size(brokers, topic))


def committed_records(brokers: str, topic: str, timeout: float = 120.0) -> int:
    """Records a ``read_committed`` consumer sees in ``topic``, read to the end of every
    partition (transaction markers take offsets but are no records)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from sqe.clients.kafka import consumer_conf

    client = Consumer(consumer_conf(brokers, "bench-chain-count", {
        "isolation.level": "read_committed", "enable.partition.eof": True}, quiet=True))
    try:
        parts = client.list_topics(topic, timeout=30).topics[topic].partitions
        client.assign([TopicPartition(topic, p, 0) for p in parts])
        at_end: set[int] = set()
        seen, deadline = 0, time.monotonic() + timeout
        while len(at_end) < len(parts) and time.monotonic() < deadline:
            for m in client.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    seen += 1
                    at_end.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
        if len(at_end) < len(parts):
            raise BenchError(f"counting {topic}: the end of every partition was not reached in "
                             f"{timeout:.0f} s")
        return seen
    finally:
        client.close()


@contextmanager
def redis_client(url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def flush(url: str) -> None:
    with redis_client(url) as client:
        client.flushdb()


@dataclass
class Expected:
    """What load.yaml leaves in Redis for the sample events ``e0 .. e<n-1>``."""

    by_region: dict[str, dict[str, str]]
    ids: set[str]


def expected_store(events: int) -> Expected:
    from sqe.cli.sample_events import sample_events

    by_region: dict[str, dict[str, str]] = {}
    for e in sample_events(events):
        by_region.setdefault(e["region"].upper(), {})[e["event_id"]] = str(e["amount"] * 100)
    return Expected(by_region, {f"e{i}" for i in range(events)})


def check_store(url: str, want: Expected) -> list[str]:
    """How the Redis content differs from what load.yaml must leave (empty: it matches)."""
    problems = []
    with redis_client(url) as client:
        for region, rows in sorted(want.by_region.items()):
            got = {k.decode(): v.decode() for k, v in client.hgetall(region).items()}
            if got != rows:
                missing = len(rows.keys() - got.keys())
                extra = len(got.keys() - rows.keys())
                wrong = sum(1 for k in rows.keys() & got.keys() if rows[k] != got[k])
                problems.append(f"events_by_region hash {region} has {len(got):,} fields for "
                                f"{len(rows):,} events ({missing:,} missing, {extra:,} extra, "
                                f"{wrong:,} with another amount_cents)")
        logged = [v.decode() for v in client.hvals("load_log")]
    ids = set(logged)
    if len(logged) != len(want.ids) or ids != want.ids:
        problems.append(f"load_log holds {len(logged):,} fields with {len(ids):,} distinct "
                        f"event ids for {len(want.ids):,} events ({len(want.ids - ids):,} "
                        f"missing, {len(ids - want.ids):,} unknown)")
    return problems


# -- sqe run -----------------------------------------------------------------------------------


def retarget(commands: list[dict[str, Any]], source: str, sink: str | None) -> None:
    """Point a shipped topology's Kafka stream at ``source`` and its Kafka state (if ``sink``)
    at ``sink``, in place."""
    streams = [c["CreateStream"] for c in commands if "CreateStream" in c]
    states = [c["Query"]["insertInto"] for c in commands
              if "Query" in c and c["Query"]["insertInto"].get("stateName") == "KAFKA"]
    if len(streams) != 1 or (sink is not None and len(states) != 1):
        raise BenchError("the shipped topologies changed shape: the chain expects one "
                         "CreateStream in each and one Kafka state in enrich.yaml")
    streams[0]["objectName"] = source
    if sink is not None:
        states[0]["objectName"] = sink


def topology_copy(name: str, source: str, sink: str | None, work: Path) -> Path:
    """``topologies/<name>.yaml`` pointed at ``source`` (and ``sink``), written under ``work``."""
    import yaml

    commands = yaml.safe_load((ROOT / "topologies" / f"{name}.yaml").read_text())
    retarget(commands, source, sink)
    path = work / f"{name}-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return path


def read_progress(checkpoint: Path) -> list[dict[str, Any]]:
    """The batch entries of ``<checkpoint>/sqe-progress.jsonl`` (an unfinished line ignored)."""
    path = checkpoint / "sqe-progress.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


@dataclass
class SqeRun:
    """One ``sqe run`` process and the batches its progress file gained."""

    proc: Proc
    batches: list[dict[str, Any]]

    @property
    def work(self) -> float:
        return sum(b["duration_s"] for b in self.batches)

    @property
    def first_batch_s(self) -> float | None:
        """Process start to the start of its first batch."""
        return (self.batches[0]["started"] - self.proc.started) if self.batches else None

    @property
    def largest_batch(self) -> int:
        return max((b["records_read"] for b in self.batches), default=0)


class Services:
    """The broker, Redis and working directory every contender of one run uses."""

    def __init__(self, brokers: str, redis_url: str, work: Path,
                 connect: str | None = None) -> None:
        self.brokers, self.redis_url, self.work = brokers, redis_url, work
        self.logs = work / "logs"
        self.connect = connect  # the Spark Connect server of the Connect row (its URL)

    def sqe_run(self, topology: Path, name: str, checkpoint: Path, *mode: str,
                remote: bool = False, tree: Path | None = None) -> SqeRun:
        """``sqe run`` in a process of its own (over the Connect server when ``remote``; with
        ``tree``'s ``sqe`` when given)."""
        from sqe.cli.local_services import service_conf

        before = len(read_progress(checkpoint))
        if remote:
            assert self.connect is not None
            mode = (*mode, "--remote", self.connect)
        command = [sys.executable, "-m", "sqe.cli.main", "run", str(topology), *mode,
                   "--name", name, "--checkpoint", str(checkpoint),
                   "--config", str(ROOT / "conf" / "local.yaml"),
                   *service_conf(self.brokers, self.redis_url)]
        over = " over Spark Connect" if remote else ""
        proc = run_process(command, f"sqe run {topology.name} ({name}){over}", self.logs, tree)
        return SqeRun(proc, read_progress(checkpoint)[before:])

    def script(self, script: str, *args: str, python: str | None = None) -> Proc:
        command = [python or sys.executable, str(BENCH / script), *args]
        return run_process(command, f"{script} {args[0]}", self.logs)


# -- the contenders ----------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run of one contender: whole-process seconds and its own clock's."""

    seconds: float
    work: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Size:
    """One ``--events`` size: its input topic and what its chain must leave in Redis."""

    events: int
    topic: str
    expected: Expected


def check_chain(s: Services, size: Size, enriched: str, enrich: str, load: str) -> None:
    """One record per event in ``enriched``, and every event once in the Redis store."""
    written = topic_records(s.brokers, enriched)
    if written != size.events:
        raise BenchError(f"{enrich} wrote {written:,} records to {enriched} for "
                         f"{size.events:,} events")
    problems = check_store(s.redis_url, size.expected)
    if problems:
        raise BenchError(f"{load}: " + "; ".join(problems))


def sqe_chain(s: Services, size: Size, rep: int, idle_run: bool, remote: bool = False
              ) -> tuple[Run, Run, dict[str, Any]]:
    """enrich then load, each ``sqe run --once`` (over Spark Connect when ``remote``); the
    chain's run, the enrich step's run, and the fixed costs seen (time to first batch, the
    load step's peak RSS, an idle run)."""
    n = size.events
    tag = f"{n}_{rep}_{'connect_' if remote else ''}{uuid.uuid4().hex[:6]}"
    enriched = new_topic(s.brokers, "bench-chain-enriched")
    flush(s.redis_url)
    runs = {}
    for step, source, sink in (("enrich", size.topic, enriched), ("load", enriched, None)):
        runs[step] = s.sqe_run(topology_copy(step, source, sink, s.work), f"chain_{step}_{tag}",
                               s.work / "checkpoints" / f"{step}_{tag}", "--once", remote=remote)
    over = " --remote" if remote else ""
    check_chain(s, size, enriched, f"sqe run{over} enrich.yaml", f"sqe run{over} load.yaml")
    enrich, load = runs["enrich"], runs["load"]
    costs: dict[str, Any] = {
        "first_batch_s": [r.first_batch_s for r in (enrich, load) if r.first_batch_s is not None],
        "load_peaks": load.proc.peaks, "load_batch_records": load.largest_batch,
        "load_batches": len(load.batches)}
    if idle_run:  # the same load again on its checkpoint: nothing new to read
        again = s.sqe_run(topology_copy("load", enriched, None, s.work), f"chain_load_{tag}",
                          s.work / "checkpoints" / f"load_{tag}", "--once")
        if again.batches or check_store(s.redis_url, size.expected):
            raise BenchError(f"sqe run load.yaml with nothing new ran {len(again.batches)} "
                             "batch(es) or changed the store")
        costs["idle_run_s"] = again.proc.seconds
    chain = Run(enrich.proc.seconds + load.proc.seconds, enrich.work + load.work,
                {"enrich_s": enrich.proc.seconds, "load_s": load.proc.seconds,
                 "enrich_batches": len(enrich.batches), "load_batches": len(load.batches)})
    return chain, Run(enrich.proc.seconds, enrich.work), costs


def plain_chain(s: Services, size: Size) -> Run:
    """bench/plain_chain.py enrich then load."""
    enriched = new_topic(s.brokers, "bench-plain-enriched")
    flush(s.redis_url)
    enrich = s.script("plain_chain.py", "enrich", "--brokers", s.brokers, "--source", size.topic,
                      "--sink", enriched)
    load = s.script("plain_chain.py", "load", "--brokers", s.brokers, "--source", enriched,
                    "--redis", s.redis_url, "--consumer", f"plain.{uuid.uuid4().hex[:8]}")
    check_chain(s, size, enriched, "plain_chain.py enrich", "plain_chain.py load")
    return Run(enrich.seconds + load.seconds, enrich.out["seconds"] + load.out["seconds"],
               {"enrich_s": enrich.seconds, "load_s": load.seconds,
                "load_peak_mb": round(load.peaks.tree / MB, 1)})


def quix_enrich(s: Services, size: Size, python: str) -> Run:
    n = size.events
    out = new_topic(s.brokers, "bench-quix-enriched")
    tag = uuid.uuid4().hex[:8]
    proc = s.script("quix_enrich.py", "--brokers", s.brokers, "--source", size.topic,
                    "--sink", out, "--count", str(n), "--group", f"bench-quix-{tag}",
                    "--state-dir", str(s.work / "quix" / tag), python=python)
    seen = committed_records(s.brokers, out)
    if seen != n:
        raise BenchError(f"quix_enrich.py left {seen:,} committed records in {out} for "
                         f"{n:,} events")
    return Run(proc.seconds, proc.out["seconds"], {"offsets": topic_records(s.brokers, out)})


def spark_read(s: Services, size: Size) -> Run:
    proc = s.script("chain_parts.py", "spark-read", "--brokers", s.brokers, "--topic", size.topic,
                    "--checkpoint", str(s.work / "checkpoints" / f"read-{uuid.uuid4().hex[:8]}"))
    if proc.out.get("rows") != size.events:
        raise BenchError(f"the Spark read counted {proc.out.get('rows')} rows of {size.events:,}")
    return Run(proc.seconds, proc.out["seconds"], {"batches": proc.out["batches"]})


def raw_read(s: Services, size: Size) -> Run:
    proc = s.script("chain_parts.py", "raw-read", "--brokers", s.brokers, "--topic", size.topic)
    if proc.out.get("rows") != size.events:
        raise BenchError(f"the raw consumer read {proc.out.get('rows')} records of "
                         f"{size.events:,}")
    return Run(proc.seconds, proc.out["seconds"])


def writer(s: Services, size: Size, part: str) -> Run:
    proc = s.script("chain_parts.py", part, "--brokers", s.brokers, "--records", str(size.events),
                    "--partitions", str(PARTITIONS))
    written = topic_records(s.brokers, proc.out["topic"])
    if written != size.events:
        raise BenchError(f"{part} left {written:,} records in {proc.out['topic']} for "
                         f"{size.events:,}")
    return Run(proc.seconds, proc.out["seconds"])


# -- the empty micro-batch ---------------------------------------------------------------------


def empty_batches(s: Services, batches: int, remote: bool = False) -> dict[str, Any]:
    """``sqe run --once`` of load.yaml over a topic of replays, one record per partition and
    batch: every batch after the first reads records and writes no row (over Spark Connect
    when ``remote``)."""
    from confluent_kafka import Producer

    from sqe.clients.kafka import producer_conf

    topic = new_topic(s.brokers, "bench-chain-quiet")
    flush(s.redis_url)
    key = struct.Struct(">qiq")
    value = json.dumps({"event_id": "q0", "user": "u0", "region": "EU", "amount": 1,
                        "amount_cents": 100, "big_spender": False}).encode()
    producer = Producer(producer_conf(s.brokers, {"log_level": 2}))
    for _ in range(batches + 1):  # the same key again and again: replays but the first
        for p in range(PARTITIONS):
            producer.produce(topic, value, key.pack(77, p, 0), p)
    if producer.flush(60):
        raise BenchError(f"could not write the replays of {topic}")
    name = f"chain_quiet_{uuid.uuid4().hex[:6]}"
    run = s.sqe_run(topology_copy("load", topic, None, s.work), name,
                    s.work / "checkpoints" / name, "--once",
                    "--conf", f"jw.sqe.spout.kafka.maxRecordsPerBatch={PARTITIONS}", remote=remote)
    with redis_client(s.redis_url) as client:
        logged = int(client.hlen("load_log"))
    later = [b for b in run.batches if b["batch_id"] >= 1]
    wrote = sum(sum(b["written"].values()) for b in later)
    kept = sum(b["records_read"] - b["replays_dropped"] for b in later)
    if logged != PARTITIONS or wrote or kept:
        raise BenchError(f"the empty-batch run logged {logged} records (expected {PARTITIONS}), "
                         f"and after its first batch kept {kept} records and wrote {wrote} rows "
                         "(expected 0)")
    if len(later) < 2:
        raise BenchError(f"the empty-batch run ran only {len(run.batches)} batches")
    cycles = [b["started"] - a["started"] for a, b in zip(later, later[1:], strict=False)]
    return {"batches": len(later), "records_read": sum(b["records_read"] for b in later),
            "cycle_s": statistics.median(cycles),
            "duration_s": statistics.median(b["duration_s"] for b in later),
            "process_s": run.proc.seconds, "first_batch_s": run.first_batch_s}


# -- the run -----------------------------------------------------------------------------------


def quix_interpreter(python: str | None) -> tuple[str | None, str]:
    """(the interpreter that runs quix_enrich.py, quixstreams' version), or (None, why not)."""
    python = python or sys.executable
    try:
        done = subprocess.run([python, "-c", "import quixstreams; print(quixstreams.__version__)"],
                              capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        return None, f"cannot run {python}: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"quixstreams is not importable by {python} ({why}); install it with "
                      "pip install 'sqe-spark[bench]' or give --quix-python")
    return python, done.stdout.strip()


def one(who: str, s: Services, size: Size, rep: int, idle_run: bool, quix_python: str | None,
        runs: dict[str, dict[int, dict[str, list[Run]]]], costs: dict[int, list[dict[str, Any]]]
        ) -> None:
    """Run contender ``who`` once on ``size`` and keep what it measured."""
    n = size.events
    if who == "sqe":
        chain, enrich, seen = sqe_chain(s, size, rep, idle_run)
        runs["chain"][n]["sqe"].append(chain)
        runs["connect"][n]["sqe"].append(chain)
        runs["enrich"][n]["sqe"].append(enrich)
        costs[n].append(seen)
    elif who == "sqe-connect":
        chain, _, _ = sqe_chain(s, size, rep, False, remote=True)
        runs["connect"][n]["sqe-connect"].append(chain)
    elif who == "plain":
        runs["chain"][n]["plain"].append(plain_chain(s, size))
    elif who == "quix":
        assert quix_python is not None
        runs["enrich"][n]["quix"].append(quix_enrich(s, size, quix_python))
    elif who in CONTENDERS["read"]:
        runs["read"][n][who].append((spark_read if who == "spark-read" else raw_read)(s, size))
    else:
        runs["write"][n][who].append(writer(s, size, who))


def rotate(items: tuple[str, ...], rep: int) -> tuple[str, ...]:
    k = rep % len(items)
    return items[k:] + items[:k]


def measure(args: argparse.Namespace, s: Services, say: Callable[[str], None]) -> dict[str, Any]:
    """Everything the benchmark measures, as the JSON object it prints."""
    from sqe.cli.sample_events import produce_events

    begin = time.perf_counter()
    quix_python, quix_info = quix_interpreter(args.quix_python)
    if quix_python is None:
        say(f"enrich vs quixstreams: skipped: {quix_info}")
    else:
        say(f"quixstreams {quix_info} ({quix_python})")
    runs: dict[str, dict[int, dict[str, list[Run]]]] = {
        row: {n: {c: [] for c in contenders} for n in args.events}
        for row, contenders in CONTENDERS.items()}
    costs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.events}
    problems: list[str] = []
    for n in args.events:
        t = time.perf_counter()
        topic = new_topic(s.brokers, "bench-chain-events")
        produce_events(s.brokers, topic, n, partitions=PARTITIONS)
        size = Size(n, topic, expected_store(n))
        say(f"{n:,} sample events in {topic} ({PARTITIONS} partitions) in "
            f"{time.perf_counter() - t:.0f} s")
        for rep in range(args.repeat):
            for group in (("sqe", "plain", "quix", "sqe-connect"), CONTENDERS["read"],
                          CONTENDERS["write"]):
                for who in rotate(group, rep):
                    if (who == "quix" and quix_python is None) or \
                            (who == "sqe-connect" and s.connect is None):
                        continue
                    try:
                        one(who, s, size, rep, args.idle_run and (n, rep) == (args.events[0], 0), quix_python,
                            runs, costs)
                    except (BenchError, SqeError) as exc:
                        what = f"{who} at {n:,} events, repetition {rep + 1}"
                        problems.append(f"{what}: {exc}")
                        say(f"error: {what}: {exc}")
            say(f"{n:,} events, repetition {rep + 1} of {args.repeat} done at "
                f"{time.perf_counter() - begin:.0f} s: " + ", ".join(
                    f"{row} {c} {r[-1].seconds:.1f} s" for row in CONTENDERS
                    for c, r in runs[row][n].items() if r and not (row == "enrich" and c == "sqe")))
        del size
    empty: dict[str, dict[str, Any]] = {}
    for how in ("classic", "connect") if s.connect else ("classic",):
        try:
            empty[how] = empty_batches(s, args.empty_batches, remote=how == "connect")
        except (BenchError, SqeError) as exc:
            problems.append(f"empty micro-batches ({how}): {exc}")
            say(f"error: empty micro-batches ({how}): {exc}")
            continue
        say(f"empty micro-batches ({how}): {empty[how]['batches']}, "
            f"{empty[how]['cycle_s']:.2f} s apart")
    result = summarize(args, runs, costs, empty, problems)
    result["quix"] = ({"python": quix_python, "version": quix_info, "skipped": None}
                      if quix_python else {"python": None, "version": None, "skipped": quix_info})
    result["seconds"] = time.perf_counter() - begin
    return result


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(args: argparse.Namespace, runs: dict[str, dict[int, dict[str, list[Run]]]],
              costs: dict[int, list[dict[str, Any]]], empty: dict[str, dict[str, Any]],
              problems: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for row, contenders in CONTENDERS.items():
        if row == "connect" and not args.connect:
            continue
        for n in args.events:
            a, b = (runs[row][n][c] for c in contenders)
            sqe_s, other_s = _median([r.seconds for r in a]), _median([r.seconds for r in b])
            sqe_w, other_w = _median([r.work for r in a]), _median([r.work for r in b])
            want = target(row, n)
            entry: dict[str, Any] = {
                "row": row, "events": n, "other": OTHER[row],
                "sqe_s": sqe_s, "other_s": other_s,
                "sqe_rps": n / sqe_s if sqe_s else None, "other_rps": n / other_s if other_s else None,
                "ratio": other_s / sqe_s if sqe_s and other_s else None,
                "work_ratio": other_w / sqe_w if sqe_w and other_w else None,
                "sqe_runs": [r.seconds for r in a], "other_runs": [r.seconds for r in b],
                "sqe_work_runs": [r.work for r in a], "other_work_runs": [r.work for r in b],
                "target": want, "skipped": None}
            if row == "chain":
                entry["sqe_steps"] = [r.extra for r in a]
                entry["other_steps"] = [r.extra for r in b]
            entry["met"] = (entry["ratio"] >= want) if want and entry["ratio"] else None
            rows.append(entry)
    if "classic" in empty:
        classic = empty["classic"]
        rows.append({"row": "empty_batch", "value": classic["cycle_s"], "unit": "s",
                     "target": EMPTY_TARGET_S, "met": classic["cycle_s"] <= EMPTY_TARGET_S,
                     **{f"empty_{k}": v for k, v in classic.items()}})
    if "connect" in empty:
        over = empty["connect"]
        hop = over["cycle_s"] - empty["classic"]["cycle_s"] if "classic" in empty else None
        rows.append({"row": "connect_hop", "value": hop, "unit": "s", "target": None,
                     "met": None, **{f"empty_{k}": v for k, v in over.items()}})
    all_costs = [c for n in args.events for c in costs[n]]
    first = [t for c in all_costs for t in c["first_batch_s"]]
    if first:
        rows.append({"row": "first_batch", "value": statistics.median(first), "unit": "s",
                     "target": None, "met": None, "runs": first})
    idle = [c["idle_run_s"] for c in all_costs if "idle_run_s" in c]
    if idle:
        rows.append({"row": "idle_run", "value": idle[0], "unit": "s", "target": None,
                     "met": None})
    for n in args.events:
        if not costs[n]:
            continue
        peaks = [c["load_peaks"] for c in costs[n]]
        batch = max(c["load_batch_records"] for c in costs[n])
        driver = max(p.driver for p in peaks) / MB
        worker = max(p.worker for p in peaks) / MB
        per_m = worker * 1_000_000 / batch if batch else None
        rows.append({"row": "driver_rss", "events": n, "value": driver, "unit": "MB",
                     "target": None, "met": None, "jvm_mb": max(p.jvm for p in peaks) / MB,
                     "tree_mb": max(p.tree for p in peaks) / MB,
                     "samples": [p.samples for p in peaks]})
        judged = batch >= 1_000_000 and per_m is not None
        rows.append({"row": "worker_rss", "events": n, "value": worker, "unit": "MB",
                     "per_million_mb": per_m, "batch_records": batch,
                     "workers_mb": max(p.workers for p in peaks) / MB,
                     "target": WORKER_TARGET_MB if judged else None,
                     "met": (per_m <= WORKER_TARGET_MB) if judged and per_m is not None else None})
    return {"events": args.events, "repeat": args.repeat, "empty_batches": args.empty_batches,
            "rows": rows, "problems": problems, "checks_passed": not problems}


def _fmt_s(seconds: float | None, events: int) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s ({events / seconds:,.0f}/s)"


def _met(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "NO"


def table(r: dict[str, Any]) -> list[str]:
    """The human-readable report."""
    cells = [("row", "events", "SQE", "other", "ratio", "work", "target", "met")]
    for e in r["rows"]:
        row, n = e["row"], e.get("events")
        if row in CONTENDERS:
            other = "-"
            if row == "enrich" and r["quix"]["skipped"]:
                other = "skipped (no quixstreams)"
            elif e["other_s"] is not None:
                other = f"{e['other']} {_fmt_s(e['other_s'], n)}"
            cells.append((LABELS[row], f"{n:,}", _fmt_s(e["sqe_s"], n), other,
                          f"{e['ratio']:.2f}" if e["ratio"] else "-",
                          f"{e['work_ratio']:.2f}" if e["work_ratio"] else "-",
                          f">= {e['target']:g}x" if e["target"] else "-", _met(e["met"])))
        elif row == "empty_batch":
            cells.append(("empty micro-batch (load.yaml, replays only)", "",
                          f"{e['value']:.2f} s per batch",
                          f"({e['empty_duration_s']:.2f} s in foreachBatch)", "", "",
                          f"<= {EMPTY_TARGET_S:g} s", _met(e["met"])))
        elif row == "connect_hop":
            hop = "-" if e["value"] is None else f"{e['value']:+.2f} s per batch"
            cells.append(("Spark Connect hop (empty micro-batch over Connect - classic)", "",
                          hop, f"({e['empty_cycle_s']:.2f} s per batch over Connect)", "", "",
                          "-", "-"))
        elif row == "first_batch":
            cells.append(("time to the first batch (sqe run start)", "", f"{e['value']:.1f} s",
                          "", "", "", "-", "-"))
        elif row == "idle_run":
            cells.append(("sqe run --once with nothing new", "", f"{e['value']:.1f} s", "", "",
                          "", "-", "-"))
        elif row == "driver_rss":
            cells.append(("peak RSS, load step: Python driver", f"{n:,}", f"{e['value']:,.0f} MB",
                          f"(JVM {e['jvm_mb']:,.0f} MB)", "", "", "-", "-"))
        elif row == "worker_rss":
            per = (f"{e['per_million_mb']:,.0f} MB per 1M records in a batch"
                   if e["per_million_mb"] else "-")
            cells.append(("peak RSS, load step: one Python worker", f"{n:,}",
                          f"{e['value']:,.0f} MB", per, "", "",
                          f"<= {WORKER_TARGET_MB:g} MB" if e["target"] else "-", _met(e["met"])))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = [f"whole processes, median of {r['repeat']}; ratio: SQE / other (the other's time "
             "over SQE's, higher is better); work: the same over each one's own clock of its "
             "work, without start-up:"]
    for c in cells:
        lines.append("  " + "  ".join(text.ljust(w) if i in (0, 3) else text.rjust(w)
                                      for i, (text, w) in enumerate(zip(c, widths, strict=True))))
    if r["quix"]["skipped"]:
        lines.append(f"enrich vs quixstreams skipped: {r['quix']['skipped']}")
    return lines


def finish(lines: list[str], result: dict[str, Any], as_json: dict[str, Any] | None) -> int:
    """Print a benchmark's report ``lines``, its problems as errors and, given ``as_json``,
    that object as one JSON line last; the exit code (1 with problems)."""
    print("\n".join(lines))
    for problem in result["problems"]:
        print(f"error: {problem}", file=sys.stderr)
    if as_json is not None:
        print(json.dumps(as_json))
    return 1 if result["problems"] else 0


def parse_list(text: str, number: Callable[[str], Any], option: str, what: str, least: str
               ) -> list[Any]:
    """``option``'s comma-separated numbers (``_`` allowed), each over 0; an ArgumentTypeError
    says ``option`` takes ``what`` separated by commas, or takes ``least``."""
    try:
        values = [number(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{option} takes {what} separated by commas, got "
                                         f"{text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{option} takes {least}")
    return values


def parse_sizes(text: str) -> list[int]:
    return parse_list(text, int, "--events", "counts", "counts of at least 1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--events", type=parse_sizes, default=[200_000, 1_000_000],
                    help="sizes, comma-separated (default 200000,1000000)")
    ap.add_argument("--repeat", type=int, default=2, help="repetitions of every contender")
    ap.add_argument("--empty-batches", type=int, default=30,
                    help="micro-batches without rows the empty-batch run makes")
    ap.add_argument("--idle-run", action="store_true",
                    help="also time sqe run --once of the first chain's load with nothing new")
    ap.add_argument("--quix-python", help="the Python that runs quix_enrich.py (default: this "
                                          "one); the row is skipped when it has no quixstreams")
    ap.add_argument("--no-connect", dest="connect", action="store_false",
                    help="leave out the chain over Spark Connect (and its server)")
    ap.add_argument("--remote", metavar="sc://HOST:PORT",
                    help="the Spark Connect server of the Connect row (its Python workers must "
                         "import this tree's sqe); default: start one")
    ap.add_argument("--brokers", help="a Kafka broker; default: start the local pip broker")
    ap.add_argument("--redis", help="a Redis URL with a database to flush; default: start "
                                    "redis-server")
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.empty_batches < 2:
        ap.error("--repeat must be at least 1 and --empty-batches at least 2")
    if args.remote and not args.connect:
        ap.error("--remote names the server of the Connect row, which --no-connect leaves out")
    say = lambda text: print(text, flush=True)  # noqa: E731
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sqe-bench-chain-")))
        try:
            brokers, redis_url = local_services(stack, work, args.brokers, args.redis)
            connect = args.remote if args.connect else None
            if args.connect and not connect:
                server = start_connect_server(work / "connect")
                stack.callback(server.kill)
                connect = server.url
                say(f"Spark Connect server at {connect}")
            result = measure(args, Services(brokers, redis_url, work, connect), say)
        except (BenchError, SqeError, ConnectionError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return finish(table(result), result, result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
