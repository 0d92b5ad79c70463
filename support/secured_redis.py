"""Private redis-server processes for the security tests: password, ACL user, TLS, Sentinel, Cluster.

Each is started from the installed ``redis-server`` on free ports in a
directory of its own and stopped by PID.  :func:`make_tls_files` writes a
throw-away CA, a server certificate for 127.0.0.1 and a client certificate
with the ``openssl`` command.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from sqe.cli.local_services import LocalService, _spawn, free_port, redis_binary


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a test CA, a server certificate and a client certificate."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA and two certificates it signed (server: 127.0.0.1/localhost; client: sqe)."""
    if not shutil.which("openssl"):
        pytest.skip("no openssl command to make test certificates")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=sqe-test-ca")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=sqe")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "san.cnf")
    d = str(directory)
    return TlsFiles(f"{d}/ca.crt", f"{d}/server.crt", f"{d}/server.key", f"{d}/client.crt",
                    f"{d}/client.key")


def _low_free_port() -> int:
    """A free port below 55536 whose port + 10000 is free too (a cluster node also listens
    there: its cluster bus)."""
    while True:
        port = free_port()
        if port <= 55535 and _free(port + 10000):
            return port


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_redis(directory: Path, args: Sequence[str], probe: dict, port: int | None = None,
                timeout: float = 20.0) -> tuple[LocalService, int]:
    """``redis-server`` with ``args`` on a free port; ready when a client built with
    ``probe`` (redis.Redis keyword arguments, host and port added) answers PING."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or _low_free_port()
    service = _spawn("redis", [redis_binary(), *args, "--bind", "127.0.0.1", "--dir",
                               str(directory)] + _port_args(args, port), directory)
    service.address = f"127.0.0.1:{port}"
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, **probe)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                return service, port
            except redis.ConnectionError:
                if service.process.poll() is not None or time.monotonic() > deadline:
                    service.stop()
                    raise RuntimeError(f"redis-server did not start: {service.log_tail()}") \
                        from None
                time.sleep(0.1)
    finally:
        client.close()


def _port_args(args: Sequence[str], port: int) -> list[str]:
    if "--tls-port" in args:
        return ["--tls-port", str(port), "--port", "0"]
    return ["--port", str(port)]


def start_cluster(directory: Path, nodes: int = 3) -> tuple[list[LocalService], list[int]]:
    """A Redis Cluster of ``nodes`` masters (no replicas) on free ports."""
    if not shutil.which("redis-cli"):
        pytest.skip("no redis-cli to create a Redis Cluster")
    services, ports = [], []
    for i in range(nodes):
        node_dir = directory / f"node{i}"
        node_dir.mkdir(parents=True)
        service, port = start_redis(node_dir, ["--cluster-enabled", "yes", "--save", "",
                                               "--appendonly", "no"], {})
        services.append(service)
        ports.append(port)
    subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                    "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True,
                   timeout=60)
    client = redis.Redis(host="127.0.0.1", port=ports[0])
    deadline = time.monotonic() + 30
    while client.cluster("info").get("cluster_state") != "ok":
        if time.monotonic() > deadline:
            raise RuntimeError("the test Redis Cluster did not reach cluster_state:ok")
        time.sleep(0.2)
    client.close()
    return services, ports


def start_sentinel(directory: Path, master_port: int, service: str,
                   down_after_ms: int | None = None) -> tuple[LocalService, int]:
    """A Sentinel watching the master on ``master_port`` under the name ``service`` (which
    it takes for down after ``down_after_ms``, Sentinel's default 30 s when None)."""
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "sentinel.conf"
    fast = (f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
            f"sentinel failover-timeout {service} {max(down_after_ms * 4, 2000)}\n"
            if down_after_ms else "")
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                    f"sentinel monitor {service} 127.0.0.1 {master_port} 1\n{fast}")
    sentinel = _spawn("sentinel", [redis_binary(), str(conf), "--sentinel"], directory)
    sentinel.address = f"127.0.0.1:{port}"
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            if client.execute_command("SENTINEL", "get-master-addr-by-name", service):
                break
        except redis.ConnectionError:
            pass
        if sentinel.process.poll() is not None or time.monotonic() > deadline:
            sentinel.stop()
            raise RuntimeError(f"redis sentinel did not start: {sentinel.log_tail()}")
        time.sleep(0.1)
    client.close()
    return sentinel, port
