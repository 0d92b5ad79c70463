"""Service processes that fault tests stop and restart on purpose (tests/test_faults.py).

* :class:`RestartableRedis`: a private ``redis-server`` on a fixed port and
  directory, with AOF persistence (``appendonly yes``, ``appendfsync always``:
  every write is on disk before Redis replies) or with none (what
  :func:`sqe.cli.local_services.start_local_redis` starts); :meth:`~RestartableRedis.crash`
  SIGKILLs it, :meth:`~RestartableRedis.start` starts it again on the same port and dir.
* :class:`PrivatePostgres`: a throwaway Postgres cluster (``initdb`` into a
  temporary directory, ``pg_ctl`` on a free port) that a test may stop with
  ``-m immediate`` (a crash: no checkpoint, open transactions lost) without
  touching a shared server.  ``initdb`` refuses to run as root, so as root it
  runs as the ``postgres`` user through ``runuser``;
  :func:`private_postgres_unavailable` says why none can be made here.

* :class:`ProxiedKafka`: the pip broker listening on 127.0.0.2 behind a
  :class:`~support.fault_proxy.FaultProxy` on the same port of 127.0.0.1, which
  makes the broker's advertised address its own, so every client connection passes the
  proxy; :meth:`~ProxiedKafka.crash` SIGKILLs the broker, :meth:`~ProxiedKafka.start`
  starts it again on its port and data.

Every process is started and stopped by its own PID.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from sqe.cli.local_services import (
    LocalService,
    free_port,
    noida_binary,
    redis_binary,
    wait_for_kafka,
)
from support.fault_proxy import FaultProxy

__all__ = ["RestartableRedis", "PrivatePostgres", "ProxiedKafka", "forget_producers",
           "private_postgres_unavailable"]


class RestartableRedis:
    """A ``redis-server`` this test owns: started, crashed and restarted on one port and dir."""

    def __init__(self, workdir: Path, aof: bool, port: int | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof = aof
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (loading its AOF, if any) and wait until it answers PING."""
        persistence = (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                       else ["--appendonly", "no"])
        self.starts += 1
        with open(self.dir / f"redis.{self.starts}.log", "wb") as log:
            self.process = subprocess.Popen(
                [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 *persistence, "--dir", str(self.dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}; see "
                                       f"{self.dir}/redis.{self.starts}.log")
                try:
                    if client.ping():
                        return
                except redis.BusyLoadingError:
                    pass  # still loading its AOF
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not answer within "
                                       f"{timeout:.0f} s")
                time.sleep(0.1)
        finally:
            client.close()

    def crash(self) -> None:
        """SIGKILL the server: no shutdown, no final save; only what is on disk survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        """Stop it for good at the end of a test (SIGTERM, then SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.crash()


def forget_producers(workdir: Path) -> int:
    """Drop the idempotent producers' state (their last sequence numbers) from the data of the
    stopped pip broker whose ``--data-dir`` is ``workdir/data``, as a broker that lost its
    producer-state snapshots comes back; returns how many (producer, partition) states went.
    A producer that goes on then has its next request refused: OUT_OF_ORDER_SEQUENCE_NUMBER,
    fatal to librdkafka's idempotent producer."""
    path = workdir / "data" / "kafka.json"
    data = json.loads(path.read_text())
    dropped = 0
    for _, topic in data["topics"]:
        for _, partition in topic["partitions"]:
            dropped += len(partition["producer_seqs"])
            partition["producer_seqs"] = []
    path.write_text(json.dumps(data))
    return dropped


class ProxiedKafka:
    """The pip broker on 127.0.0.2, reached through a fault proxy at ``address``."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.proxy = FaultProxy(("127.0.0.2", self.port), port=self.port,
                                kafka=(b"127.0.0.2", b"127.0.0.1"))
        self.address = f"127.0.0.1:{self.port}"
        self.service: LocalService | None = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> None:
        """Start the broker on its port and data and wait until it answers through the proxy."""
        self.starts += 1
        self.proxy.blackhole(0)  # lifts the dark of :meth:`shut`
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f"kafka.{self.starts}.log", "wb") as log:
            process = subprocess.Popen(
                [noida_binary(), "start", "--only", "kafka", "--kafka-port", str(self.port),
                 "--host", "127.0.0.2", "--data-dir", str(self.dir / "data")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.dir, start_new_session=True)
        self.service = LocalService("kafka", self.address, process,
                                    self.dir / f"kafka.{self.starts}.log")
        wait_for_kafka(self.address, timeout, self.service)

    def shut(self) -> None:
        """Stop the broker cleanly, as a Kafka broker's controlled shutdown does: its clients
        are cut off first, then SIGTERM; the proxy stays dark (clients find nobody) until
        :meth:`start`.  The pip broker, stopped with clients still connected, goes on
        acknowledging their requests after it saved its log and loses those records (tried:
        about 10 of the last acknowledged of a steady idempotent producer, whose next request
        then fails with OUT_OF_ORDER_SEQUENCE_NUMBER), which a Kafka broker does not."""
        if self.service is not None:
            self.proxy.blackhole(float("inf"))
            self.proxy.cut()
            time.sleep(1.0)  # a moment for its last acknowledged writes, as a controlled shutdown
            self.service.stop(timeout=30)

    def forget_producers(self) -> int:
        """After :meth:`shut`: the broker comes back without its producers' state (see
        :func:`forget_producers`)."""
        return forget_producers(self.dir)

    def crash(self) -> None:
        """SIGKILL the broker (the proxy stays).  The pip broker loses the records it
        acknowledged last when killed, which a Kafka broker does not (they are in the page
        cache): a test of SQE's exactly-once uses :meth:`shut`."""
        if self.service is not None and self.service.process.poll() is None:
            self.service.process.send_signal(signal.SIGKILL)
            self.service.process.wait(30)

    def stop(self) -> None:
        """Stop the broker and the proxy for good."""
        if self.service is not None:
            self.service.stop()
        self.proxy.stop()


def _major(initdb: str) -> int:
    name = Path(initdb).parent.parent.name  # /usr/lib/postgresql/<major>/bin/initdb
    return int(name) if name.isdigit() else 0


def _postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: Debian's newest, else on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _as_owner(args: list[str]) -> list[str]:
    """``args`` run as the ``postgres`` user when we are root (initdb and postgres refuse root)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def private_postgres_unavailable() -> str | None:
    """Why no private Postgres cluster can be made on this machine, or None when one can."""
    if _postgres_bin() is None:
        return "no initdb/pg_ctl (neither /usr/lib/postgresql/*/bin nor on PATH)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root without runuser, so initdb cannot run as the postgres user"
    return None


class PrivatePostgres:
    """A Postgres cluster in a temporary directory, on a free port of 127.0.0.1 (trust auth)."""

    def __init__(self) -> None:
        bindir = _postgres_bin()
        assert bindir is not None, private_postgres_unavailable()
        self.bin = bindir
        self.root = Path(tempfile.mkdtemp(prefix="sqe-pg-"))  # not under pytest's 0700 tmp
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.data = self.root / "data"
        self.port = free_port()
        self.running = False
        done = subprocess.run(
            _as_owner([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                       "-A", "trust", "--no-sync"]),
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            shutil.rmtree(self.root, ignore_errors=True)
            raise RuntimeError(f"initdb failed: {(done.stderr or done.stdout).strip()[-500:]}")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str) -> None:
        done = subprocess.run(_as_owner([str(self.bin / "pg_ctl"), "-D", str(self.data), *args]),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: "
                               f"{(done.stderr or done.stdout).strip()[-500:]}")

    def start(self) -> None:
        """Start the server (crash recovery first, after an immediate stop) and wait for it."""
        self._pg_ctl("-l", str(self.root / "server.log"), "-w", "-t", "120", "-o",
                     f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")
        self.running = True

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` aborts every session and skips the checkpoint."""
        self._pg_ctl("-m", mode, "-w", "-t", "120", "stop")
        self.running = False

    def close(self) -> None:
        """Stop the server if it runs and delete the cluster."""
        try:
            if self.running:
                self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
