"""A real Spark Connect server for tests: pyspark's own ``sbin/start-connect-server.sh --wait``
(a local[2] master), in the foreground in a process group of its own, stopped by that group.
Its JVM runs with the client JIT compiler only, as every JVM of the suite (tests/conftest.py).

Its Python workers and its ``foreachBatch`` processes run the test's interpreter, which has
SQE installed; the clients connect to ``sc://127.0.0.1:<port>``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

from sqe.cli.local_services import free_port
from support.spark_cluster import CLIENT_JIT_CONF, Process

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class ConnectServer(Process):
    """A running server: its URL and port besides its process (group) and log."""

    url: str
    port: int
    workdir: Path


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def start_connect_server(workdir: Path, port: int | None = None, timeout: float = 120.0,
                         python: str = sys.executable) -> ConnectServer:
    """Start a server on ``port`` (a free one by default) whose Python workers run ``python``,
    and wait until it takes clients."""
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"connect-{port}.log"
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE",)}
    env.update(SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=python,
               SPARK_LOG_DIR=str(workdir), SPARK_PID_DIR=str(workdir),
               SPARK_NO_DAEMONIZE="1")
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait",
             "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
             "--conf", "spark.sql.adaptive.enabled=false",
             "--conf", "spark.sql.session.timeZone=UTC", *CLIENT_JIT_CONF],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
    server = ConnectServer("connect", popen, log, f"sc://127.0.0.1:{port}", port, workdir)
    deadline = time.monotonic() + timeout
    while not _answers(port):
        if popen.poll() is not None:
            raise AssertionError(f"the Spark Connect server exited: {server.tail()}")
        if time.monotonic() > deadline:
            server.kill()
            raise AssertionError(f"the Spark Connect server did not answer: {server.tail()}")
        time.sleep(0.5)
    return server
