"""A real Spark standalone cluster for tests: a master and workers, each its own JVM, started
from pyspark's own ``bin/spark-class`` and stopped by PID (a worker can also be SIGKILLed with
its executors, and another started in its place).

Workers run with an environment that has no SQE: no ``PYSPARK_PYTHON``, no ``PYTHONPATH``,
and a ``PATH`` whose ``python3`` is the machine's, so executors get SQE only from what a
job ships (``--archives env.tar.gz#environment``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from sqe.cli.local_services import free_port

SPARK_HOME = Path(pyspark.__file__).parent
#: Variables a worker must not inherit from the test's process, which has SQE installed.
_LEAKS = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV",
          "SPARK_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SQE_FAULT")


#: The JIT option every JVM of the suite runs with (tests/conftest.py says why).
CLIENT_JIT = "-XX:TieredStopAtLevel=1"

#: ``spark-submit`` arguments that give a submitted application's driver and executors
#: :data:`CLIENT_JIT` (PySpark's own sessions get them from ``PYSPARK_SUBMIT_ARGS``).
CLIENT_JIT_CONF = ["--conf", f"spark.driver.defaultJavaOptions={CLIENT_JIT}",
                   "--conf", f"spark.executor.defaultJavaOptions={CLIENT_JIT}"]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without what would hand SQE to a worker's Python."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS}
    venv_bin = str(Path(os.sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != venv_bin)
    env["SPARK_HOME"] = str(SPARK_HOME)
    env.update(extra)
    return env


@dataclass
class Process:
    """One JVM of the cluster, in its own process group, with its log."""

    name: str
    popen: subprocess.Popen
    log: Path

    def kill(self) -> None:
        """SIGKILL the JVM and everything it started (a worker's executors and their Python)."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(30)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class StandaloneCluster:
    """A master and its workers on 127.0.0.1."""

    workdir: Path
    master_port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    master: Process | None = None
    workers: list[Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, args: list[str]) -> Process:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir,
                env=clean_env(SPARK_WORKER_DIR=str(self.workdir / "work"),
                              SPARK_LOG_DIR=str(self.workdir)),
                start_new_session=True)
        return Process(name, popen, log)

    def start_master(self) -> None:
        self.master = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.master_port), "--webui-port", str(self.ui_port)])
        self._wait(lambda: self._state() is not None, "the master's web UI", self.master)

    def start_worker(self, cores: int = 1, memory: str = "1g") -> Process:
        n = len(self.workers)
        worker = self._spawn(f"worker{n}", [
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
            "--work-dir", str(self.workdir / f"work{n}")])
        self.workers.append(worker)
        alive = self.alive_workers()
        self._wait(lambda: self.alive_workers() > alive, f"worker {n} to register", worker)
        return worker

    def _state(self) -> dict | None:
        import json
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):  # not up yet, or its UI answered before it had a state
            return None

    def alive_workers(self) -> int:
        state = self._state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready: Callable[[], bool], what: str, process: Process,
              timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process.popen.poll() is not None:
                raise AssertionError(f"{process.name} exited: {process.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {process.tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in [*self.workers, *([self.master] if self.master else [])]:
            p.kill()


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 1) -> Iterator[StandaloneCluster]:
    """A running master with ``workers`` workers (1 core, 1 GB each); every JVM is killed by
    its process group at the end, also when the test fails."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = StandaloneCluster(workdir)
    try:
        cluster.start_master()
        for _ in range(workers):
            cluster.start_worker()
        yield cluster
    finally:
        cluster.stop()
