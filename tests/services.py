"""How the test suite finds a real Kafka broker and a real Redis (DESIGN.md section 6).

Each service is chosen in this order:

1. the environment (``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``), so the same
   tests run against real clusters;
2. a testcontainers container, when a Docker engine answers;
3. a local process started from an installed binary (the pip broker
   ``noida-db``, ``redis-server``), stopped by PID at the end of the session.

The chosen service is announced on the terminal so a run says what it tested against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqe.local_services import start_local_kafka, start_local_redis


@dataclass(frozen=True)
class Endpoint:
    """Where a service answers and what provides it (env, docker or local)."""

    address: str
    provider: str


def docker_engine_available() -> bool:
    """True when a Docker engine answers (not merely a docker client installed)."""
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def kafka_endpoint(workdir: Path) -> Iterator[Endpoint]:
    """A Kafka bootstrap address for the whole session."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield Endpoint(env, "KAFKA_BOOTSTRAP_SERVERS")
        return
    if docker_engine_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield Endpoint(container.get_bootstrap_server(), "testcontainers Kafka")
        return
    service = start_local_kafka(workdir / "kafka")
    try:
        yield Endpoint(service.address, f"local noida-db broker (pid {service.process.pid})")
    finally:
        service.stop()


@contextmanager
def redis_endpoint(workdir: Path) -> Iterator[Endpoint]:
    """A Redis base URL (no database index) for the whole session."""
    env = os.environ.get("REDIS_URL")
    if env:
        yield Endpoint(env, "REDIS_URL")
        return
    if docker_engine_available():
        from testcontainers.redis import RedisContainer

        with RedisContainer() as container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(6379)
            yield Endpoint(f"redis://{host}:{port}", "testcontainers Redis")
        return
    service = start_local_redis(workdir / "redis")
    try:
        yield Endpoint(service.address, f"local redis-server (pid {service.process.pid})")
    finally:
        service.stop()
