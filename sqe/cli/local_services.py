"""Local Kafka and Redis processes for tests and the demo, started and stopped by PID.

Production points SQE at real clusters.  Tests and ``sqe demo`` need a broker
and a Redis on a machine that may have neither Docker nor a Kafka package,
so this module starts:

* a Kafka-protocol broker from the pip package ``noida-db`` -- its binary is
  run directly (not the Python wrapper) with ``start --only kafka``, and
  ready when a metadata request succeeds;
* ``redis-server`` (Debian's, or the pip package ``redis-server``) on a free
  port, with persistence off for tests, or with the append-only file on
  (``persistent=True``, what ``sqe services`` asks for, so the HWM store's
  persistence check is satisfied).

Data directories are made absolute first (redis-server changes into its own).
Each returns a :class:`LocalService` whose :meth:`~LocalService.stop` ends
the process by PID; a start that fails or is interrupted stops the process
again.  ``sqe services`` itself is :mod:`sqe.cli.services`.

The pip broker ignores fetch-size limits, so clients must raise
``receive.message.max.bytes`` (:data:`KAFKA_CLIENT_DEFAULTS`), and it deletes
records older than 7 days unless a topic has ``retention.ms=-1``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import redis
from confluent_kafka.admin import AdminClient

from sqe.clients.kafka import CLIENT_DEFAULTS
from sqe.config.extras import install_hint
from sqe.errors import PrerequisiteError

__all__ = [
    "LocalService",
    "KAFKA_CLIENT_DEFAULTS",
    "free_port",
    "noida_binary",
    "redis_binary",
    "start_local_kafka",
    "start_local_redis",
    "wait_for_kafka",
    "service_conf",
]

#: Client settings needed against the pip broker (harmless against real Kafka).
KAFKA_CLIENT_DEFAULTS = CLIENT_DEFAULTS


@dataclass
class LocalService:
    """A service process this module started: its address, process and log file."""

    name: str
    address: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the process wrote, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def noida_binary() -> str:
    """Path of the ``noida-db`` binary shipped in the pip package."""
    spec = importlib.util.find_spec("noida_db")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteError(
            "no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS, run a Docker engine, or install "
            f"the local Kafka-protocol broker the tests and the demo use: {install_hint('noida_db')}"
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "noida-db"
    if not os.access(binary, os.X_OK):
        raise PrerequisiteError(f"the noida-db package has no executable binary at {binary}")
    return str(binary)


def redis_binary() -> str:
    """Path of a ``redis-server`` binary: on PATH, or from the pip package ``redis-server``."""
    found = shutil.which("redis-server")
    if found:
        return found
    if importlib.util.find_spec("redis_server") is not None:
        import redis_server

        path = getattr(redis_server, "REDIS_SERVER_PATH", None)
        if path and os.access(path, os.X_OK):
            return str(path)
    raise PrerequisiteError(
        "no redis-server: set REDIS_URL, run a Docker engine, install Debian's "
        "redis-server (apt-get install redis-server) or pip install redis-server"
    )


def _spawn(name: str, args: list[str], workdir: Path) -> LocalService:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    log = open(log_path, "wb")
    try:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir,
            start_new_session=True,
        )
    finally:
        log.close()
    return LocalService(name, "", process, log_path)


def _wait_ready(service: LocalService | None, what: str, probe: Callable[[], None],
                timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if service is not None and service.process.poll() is not None:
            raise PrerequisiteError(
                f"{service.name} exited with code {service.process.returncode} while starting; "
                f"the last lines of {service.log_path}:\n{service.log_tail(5)}"
            )
        try:
            probe()
            return
        except Exception as exc:
            last = exc
            time.sleep(0.2)
    log = ""
    if service is not None:
        service.stop()
        log = f"; the last lines of {service.log_path}:\n{service.log_tail(5)}"
    raise PrerequisiteError(f"{what} did not become ready in {timeout:.0f} s (last error: {last}){log}")


def wait_for_kafka(bootstrap: str, timeout: float = 60.0,
                   process: LocalService | None = None) -> None:
    """Block until a metadata request to ``bootstrap`` succeeds, or raise :class:`PrerequisiteError`."""
    # log_level 0: the refused connections before the broker listens are expected, not news
    clients = [AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})]

    def probe() -> None:
        clients[0].list_topics(timeout=1)

    try:
        _wait_ready(process, f"Kafka at {bootstrap}", probe, timeout)
    finally:
        clients.clear()  # close the client now, not when the broker is already gone


def start_local_kafka(data_dir: str | Path, port: int | None = None,
                      timeout: float = 60.0) -> LocalService:
    """Start the pip broker on 127.0.0.1 and wait until it answers a metadata request."""
    port = port or free_port()
    data = Path(data_dir).expanduser().absolute()
    service = _spawn("kafka", [noida_binary(), "start", "--only", "kafka", "--kafka-port",
                               str(port), "--host", "127.0.0.1", "--data-dir", str(data / "data")],
                     data)
    service.address = f"127.0.0.1:{port}"
    try:
        wait_for_kafka(service.address, timeout, service)
    except BaseException:  # not ready, or Ctrl-C meanwhile: leave no broker behind
        service.stop()
        raise
    return service


def start_local_redis(data_dir: str | Path, port: int | None = None, databases: int = 256,
                      timeout: float = 20.0, persistent: bool = False) -> LocalService:
    """Start ``redis-server`` on 127.0.0.1 with ``databases`` indexes: persistence off, or
    with ``persistent`` the append-only file on (``appendfsync everysec``) in ``data_dir``."""
    port = port or free_port()
    data = Path(data_dir).expanduser().absolute()
    aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if persistent else \
        ["--appendonly", "no"]
    service = _spawn("redis", [redis_binary(), "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", *aof, "--dir", str(data),
                               "--databases", str(databases)], data)
    service.address = f"redis://127.0.0.1:{port}"
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)

    def probe() -> None:
        client.ping()

    try:
        _wait_ready(service, f"redis-server at {service.address}", probe, timeout)
    except BaseException:  # not ready, or Ctrl-C meanwhile: leave no redis-server behind
        service.stop()
        raise
    finally:
        client.close()
    return service


def service_conf(brokers: str, redis_url: str, postgres_dsn: str | None = None) -> list[str]:
    """The ``--conf`` arguments that point ``sqe run`` (and conf/local.yaml) at these services:
    both Kafka sides, the HWM store and the Redis state in the same server and database (so
    Redis states commit atomically with the HWMs), and a Postgres state when given."""
    url = urlsplit(redis_url)
    pairs = [f"jw.sqe.spout.kafka.brokers={brokers}", f"jw.sqe.state.kafka.brokers={brokers}",
             f"jw.sqe.spout.kafka.filterReplays.redis.url={redis_url}",
             f"jw.sqe.state.redis.host={url.hostname}", f"jw.sqe.state.redis.port={url.port}",
             f"jw.sqe.state.redis.database={url.path.strip('/') or 0}"]
    if postgres_dsn:
        pairs.append(f"jw.sqe.state.postgres.dsn={postgres_dsn}")
    return [arg for pair in pairs for arg in ("--conf", pair)]
