"""What the nemesis runs and breaks: the chain, its stores behind fault proxies, and the faults.

:class:`World` starts, on loopback only, the pip broker behind a Kafka-aware proxy, two Redis
servers with a Sentinel (each server behind a proxy; the HWM store and load's Redis states
through the Sentinel, so a commit waits for the replica), a private Postgres cluster behind a
proxy, and the two ``sqe run`` processes of the chain (enrich into a Kafka topic, load into
Redis and Postgres).  :meth:`World.inflict` does one :class:`~bench.nemesis_schedule.Fault` and
undoes it after its hold; faults on one target wait for each other, faults on different
targets overlap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

from bench.harness import ROOT
from bench.harness.processes import child_env, last_error
from bench.harness.topics import EventWriter, create_topic
from bench.harness.topologies import topology_copy
from bench.nemesis_runs import HopRun, PipelineRun, Run
from bench.nemesis_schedule import Fault
from sqe.engine.run.lock import HEARTBEAT_SECONDS, STALE_SECONDS
from support.connect_server import start_connect_server
from support.fault_proxy import FaultProxy
from support.fault_services import PrivatePostgres, ProxiedKafka
from support.proxied_redis import ProxiedRedisPair
from support.spark_cluster import StandaloneCluster

#: The request whose reply a ``lost-reply`` fault drops, per store.
#: The size of the tmpfs the runs' checkpoints live on (a disk-full fault fills it).
DISK_MB = 1024
COMMIT_REQUEST: dict[str, bytes | int] = {"kafka": 0, "redis": b"EVALSHA", "postgres": b"COMMIT"}
POSTGRES_TABLE = "loaded_events"
#: The keys of a consumer that a ``forget`` fault takes from the HWM store.
FORGOTTEN = {b"hwm", b"age", b"ts", b"batch", b"commit", b"ack"}


class SteadyProducer(EventWriter):
    """soak's writer of the sample events, which goes on through a broker away: a failed
    send is noted in ``troubles`` and the client made again a second later (the events of
    that round may or may not be in the topic; the checker counts what the topic holds).
    ``acked`` holds the ids of the events the broker acknowledged (a delivery report each)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.troubles: list[str] = []
        self.acked: set[str] = set()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(json.loads(msg.value())["event_id"])
        elif len(self.troubles) < 20:
            self.troubles.append(f"not delivered: {err}")

    def run(self) -> None:
        from sqe.cli.sample_events import sample_events
        from sqe.clients.kafka import Sender, new_producer, producer_conf

        events, start = sample_events(10**12), time.monotonic()
        sender = None
        while not self.halt.wait(0.05) and time.monotonic() - start < self.seconds:
            try:
                if sender is None:  # a delivery report of every record: the acked ids
                    sender = Sender(new_producer(
                        {**producer_conf(self.brokers, {"log_level": 2}),
                         "on_delivery": self._delivered}, "nemesis events"), reports_all=False)
                n = int(self.rate * (time.monotonic() - start)) - self.sent
                sender.send_many(self.topic, [json.dumps(next(events)).encode()
                                              for _ in range(n)], [None] * n, [-1] * n)
                self.sent += n
                sender.poll(0)
                if sender.stopped is not None:  # for good (the broker lost its state of it)
                    self.troubles.append(f"{time.monotonic() - start:.0f} s: {sender.stopped}")
                    sender = None
            except Exception as exc:  # noted; the next round sends with a new client
                self.troubles.append(f"{time.monotonic() - start:.0f} s: {exc}")
                sender = None
                time.sleep(1)
        problem = sender.finish(60) if sender is not None else None
        self.error = "; ".join(self.troubles + ([problem] if problem else [])) or None


class World:
    """The services and the chain (see the module docstring)."""

    def __init__(self, out: Path, say: Any, cluster: bool = False, connect: bool = False
                 ) -> None:
        self.out, self.say = out, say
        #: with ``connect``: the Spark Connect server the hops run on
        self.connect = start_connect_server(out / "connect") if connect else None
        self.cluster: StandaloneCluster | None = None
        if cluster:  # load's executors on a standalone cluster of two workers
            self.cluster = StandaloneCluster(out / "cluster")
            self.cluster.workdir.mkdir(parents=True, exist_ok=True)
            self.cluster.start_master()
            for _ in range(2):
                self.cluster.start_worker(cores=1, memory="1g")
        # the runs' checkpoints (out/checkpoints/<run>) on a filesystem a disk-full fault fills
        self.disk = out / "checkpoints"
        self.disk.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs",
                                  str(self.disk)], capture_output=True, text=True)
        self.mounted = mounted.returncode == 0
        if not self.mounted:
            say(f"warning: no filesystem of its own for the checkpoints (mount: "
                f"{mounted.stderr.strip()}); disk-full faults are skipped")
        self.kafka = ProxiedKafka(out / "kafka")
        self.kafka.start()
        self.redis = ProxiedRedisPair(out / "redis")
        self.postgres = PrivatePostgres()
        self.postgres.start()
        self.pg_proxy = FaultProxy(("127.0.0.1", self.postgres.port))
        self.proxies: dict[str, Any] = {"kafka": self.kafka.proxy, "postgres": self.pg_proxy}
        self.locks = {t: threading.Lock() for t in ("enrich", "load", "kafka", "redis",
                                                    "postgres", "cluster", "hwm",
                                                    "checkpoint", "connect")}
        self.runs: dict[str, Run] = {}
        self.events = self.enriched = ""

    @property
    def brokers(self) -> str:
        return self.kafka.address

    @property
    def direct_brokers(self) -> str:
        """The broker itself, past its proxy (for the producer of the input and the checker)."""
        return f"127.0.0.2:{self.kafka.port}"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_proxy.port}/postgres"

    def proxy(self, store: str) -> FaultProxy:
        return self.redis.primary().proxy if store == "redis" else self.proxies[store]

    def start_chain(self, tag: str, way: str = "topology", clocks: bool = False) -> None:
        """The chain's two runs, each a topology file run by ``sqe run`` (``way`` topology)
        or the same hop in plain PySpark (:data:`~bench.nemesis_runs.HOP_WAYS`); ``clocks``:
        their drivers' clocks steppable, for clock faults."""
        self.events = create_topic(self.direct_brokers, "nemesis-events")
        self.enriched = create_topic(self.direct_brokers, "nemesis-enriched")
        conf = [f"jw.sqe.spout.kafka.brokers={self.brokers}",
                f"jw.sqe.state.kafka.brokers={self.brokers}",
                f"jw.sqe.spout.kafka.filterReplays.redis.url={self.redis.url}",
                f"jw.sqe.state.redis.url={self.redis.url}",
                f"jw.sqe.state.postgres.dsn={self.dsn}",
                "jw.sqe.spout.kafka.maxRecordsPerBatch=5000"]
        args = [a for pair in conf for a in ("--conf", pair)]
        enrich = topology_copy("enrich", self.events, self.enriched, self.out)
        load = topology_copy("load", self.enriched, None, self.out)
        commands = yaml.safe_load(load.read_text())
        commands.append({"Query": {
            "insertInto": {"objectName": POSTGRES_TABLE, "stateName": "POSTGRES",
                           "fields": ["event_id", "region", "amount_cents", "position"]},
            "select": {"expressions": ["event_id", "region", "amount_cents",
                                       {"sql": "concat(_partition, ':', _offset)"}]},
            "from": {"objectName": "Enriched"}}})
        load.write_text(yaml.safe_dump(commands, sort_keys=False))
        on_cluster: list[str] = []
        if self.cluster is not None:
            spark = self.out / "cluster.yaml"
            spark.write_text(yaml.safe_dump({"Spark": {
                "spark.master": self.cluster.url, "spark.executor.memory": "1g",
                "spark.cores.max": "2", "spark.executor.cores": "1"}}))
            on_cluster = ["--config", str(spark)]
        for step, path, topic in (("enrich", enrich, self.events),
                                  ("load", load, self.enriched)):
            more = on_cluster if step == "load" else []
            name = f"nemesis_{step}_{tag}"
            if way == "topology":
                self.runs[step] = Run(name, path, topic, self.out, args + more)
            elif way == "pipeline":
                self.runs[step] = PipelineRun(step, name, path, topic, self.out, args,
                                              self.events, self.enriched, POSTGRES_TABLE)
            else:
                self.runs[step] = HopRun(step, name, path, topic, self.out, args, way,
                                         self.events, self.enriched,
                                         self.connect.url if self.connect else None)
            if clocks:
                self.runs[step].steppable()
            self.runs[step].start(time.monotonic())

    # -- the faults ------------------------------------------------------------------------
    def inflict(self, fault: Fault, journal: dict[str, Any]) -> None:
        """Do ``fault``, hold it, undo it; what happened goes into ``journal``."""
        with self.locks[fault.target]:
            journal["began"] = time.monotonic()
            getattr(self, "_" + fault.kind.replace("-", "_"))(fault, journal)
            journal["ended"] = time.monotonic()

    def _kill(self, fault: Fault, journal: dict[str, Any]) -> None:
        run = self.runs[fault.target]
        run.killed = True
        journal["exit"] = run.end()
        time.sleep(fault.hold)
        run.killed = False
        run.start(time.monotonic())

    def _pause(self, fault: Fault, journal: dict[str, Any]) -> None:
        run = self.runs[fault.target]
        run.signal_all(signal.SIGSTOP)
        time.sleep(fault.hold)
        run.signal_all(signal.SIGCONT)

    def _takeover(self, fault: Fault, journal: dict[str, Any]) -> None:
        run = self.runs[fault.target]
        run.signal_all(signal.SIGSTOP)
        time.sleep(min(fault.hold, STALE_SECONDS + 2))  # its heartbeat reads stale now ...
        rival = run.start_rival()  # ... and stays so while the rival watches it
        time.sleep(max(0.0, fault.hold - STALE_SECONDS - 2))
        run.signal_all(signal.SIGCONT)
        # the first run finds the taker's lock at its next heartbeat and stops
        deadline = time.monotonic() + 3 * HEARTBEAT_SECONDS
        first = run.process
        while first is not None and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        journal["first_run"] = "still running" if first is None or first.poll() is None else \
            f"exited {first.returncode}: {last_error(run.log)}"
        if rival.poll() is None:
            run.adopt(rival, run.rivals[-1][1])

    def _restart(self, fault: Fault, journal: dict[str, Any]) -> None:
        if fault.target == "kafka":  # a controlled shutdown: clients cut off, then SIGTERM
            self.kafka.shut()          # (the pip broker loses acknowledged records otherwise)
            if fault.lagging:
                journal["producers_forgotten"] = self.kafka.forget_producers()
            time.sleep(fault.hold)
            self.kafka.start(timeout=120)
        else:
            self.postgres.stop("immediate")
            time.sleep(fault.hold)
            self.postgres.start()

    def _failover(self, fault: Fault, journal: dict[str, Any]) -> None:
        journal["promoted_s"] = round(self.redis.fail_over(fault.lagging), 1)

    def _lose_worker(self, fault: Fault, journal: dict[str, Any]) -> None:
        if self.cluster is None:
            journal["skipped"] = "no --cluster"
            return
        alive = [w for w in self.cluster.workers if w.popen.poll() is None]
        alive[0].kill()  # the worker and its executor, with its Python workers
        time.sleep(fault.hold)
        self.cluster.start_worker(cores=1, memory="1g")

    def _cut(self, fault: Fault, journal: dict[str, Any]) -> None:
        self.proxy(fault.target).cut()

    def _lost_reply(self, fault: Fault, journal: dict[str, Any]) -> None:
        proxy = self.proxy(fault.target)
        before = proxy.replies_lost
        proxy.lose_reply_to(COMMIT_REQUEST[fault.target])
        deadline = time.monotonic() + 60
        while proxy.replies_lost == before and time.monotonic() < deadline:
            time.sleep(0.1)
        proxy.lose_reply_to(b"\0never\0")  # disarmed: no request holds it
        journal["reply_lost"] = proxy.replies_lost > before

    def _blackhole(self, fault: Fault, journal: dict[str, Any]) -> None:
        self.proxy(fault.target).blackhole(fault.hold)
        time.sleep(fault.hold)

    def _delay(self, fault: Fault, journal: dict[str, Any]) -> None:
        self.proxy(fault.target).delay(fault.latency, fault.hold)
        time.sleep(fault.hold)

    def _forget(self, fault: Fault, journal: dict[str, Any]) -> None:
        """The HWM store loses the marks and commit records of the consumers (not the rows
        staged for Redis states, which a store of its own would not hold)."""
        client = self.redis.client()
        try:
            def marks_keys() -> list[bytes]:
                return [k for k in client.scan_iter(match="sqe:{*}:*", count=1000)
                        if k.rsplit(b":", 1)[-1] in FORGOTTEN]
            copy = {k: client.dump(k) for k in marks_keys()} if fault.lagging else {}
            if fault.lagging:
                time.sleep(fault.hold)  # the chain goes on; the copy grows older
            gone = marks_keys()
            pipe = client.pipeline(transaction=True)
            if gone:
                pipe.delete(*gone)
            for key, value in copy.items():
                pipe.restore(key, 0, value, replace=True)
            pipe.execute()
            journal["forgot"] = len(gone)
        finally:
            client.close()

    def _server_kill(self, fault: Fault, journal: dict[str, Any]) -> None:
        """The Spark Connect server SIGKILLed, started again on its port after the hold."""
        assert self.connect is not None
        self.connect.kill()
        time.sleep(fault.hold)
        began = time.monotonic()
        self.connect = start_connect_server(self.out / "connect", self.connect.port)
        journal["started_s"] = round(time.monotonic() - began, 1)

    def _clock(self, fault: Fault, journal: dict[str, Any]) -> None:
        """The run's clock stepped for the fault's hold, then the real one again."""
        clock = self.runs[fault.target].clock
        if clock is None:
            journal["skipped"] = "its clock cannot be stepped here"
            return
        clock.step(fault.step)
        try:
            time.sleep(fault.hold)
        finally:
            clock.step(0)

    def _disk_full(self, fault: Fault, journal: dict[str, Any]) -> None:
        """The checkpoints' filesystem full for the fault's hold, then freed."""
        if not self.mounted:
            journal["skipped"] = "no filesystem of its own"
            return
        filler = self.disk / ".filler"
        block, written = b"\0" * (1 << 20), 0
        with open(filler, "wb", buffering=0) as out:
            try:
                while True:
                    written += out.write(block)
            except OSError as exc:  # ENOSPC: full
                journal["full"] = exc.strerror
        journal["filled_mb"] = written >> 20
        time.sleep(fault.hold)
        filler.unlink()

    def heal(self, name: str, said: str) -> str | None:
        """Follow the way back a refused run printed, as an operator would: the ``sqe hwm
        rebuild`` command it names (with ``--yes``), or for a hop its ``rebuild_marks()``
        (the example's ``--rebuild-marks``); what it said, or None when it named none."""
        command = self.runs[name].heal_command(said)
        if command is None:
            return None
        done = subprocess.run(command, capture_output=True, text=True, env=child_env(),
                              cwd=ROOT, timeout=600)
        if done.returncode != 0:
            return f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
        said_lines = done.stdout.strip().splitlines() or done.stderr.strip().splitlines()
        return said_lines[-1] if said_lines else "(it said nothing)"  # its sentence: stdout's
        #                               last line, not a Spark log line on stderr

    def stop(self) -> None:
        for run in self.runs.values():
            run.signal_all(signal.SIGCONT)
            run.end()
            for rival, _ in run.rivals:
                with suppress(ProcessLookupError):
                    os.killpg(rival.pid, signal.SIGKILL)
        if self.connect is not None:
            self.connect.kill()
        stops = [self.kafka.stop, self.redis.stop, self.pg_proxy.stop, self.postgres.close,
                 *([self._unmount] if self.mounted else [])]
        for stop in stops + ([self.cluster.stop] if self.cluster is not None else []):
            try:
                stop()
            except Exception as exc:  # the next service still stops; this one is named
                self.say(f"warning: could not stop {stop.__qualname__}: {exc}")

    def _unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.disk)], check=True, capture_output=True)
