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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqe.local_services import LocalService, start_local_kafka, start_local_redis


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
def _endpoint(env_var: str, docker: Callable[[], AbstractContextManager[str]],
              local: Callable[[], LocalService]) -> Iterator[Endpoint]:
    """The env variable's address, else a container's, else a local process's."""
    env = os.environ.get(env_var)
    if env:
        yield Endpoint(env, env_var)
        return
    if docker_engine_available():
        with docker() as address:
            yield Endpoint(address, "testcontainers")
        return
    service = local()
    try:
        yield Endpoint(service.address, f"local {service.name} process (pid {service.process.pid})")
    finally:
        service.stop()


@contextmanager
def _kafka_container() -> Iterator[str]:
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as container:
        yield container.get_bootstrap_server()


@contextmanager
def _redis_container() -> Iterator[str]:
    from testcontainers.redis import RedisContainer

    with RedisContainer() as container:
        yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}"


def kafka_endpoint(workdir: Path) -> AbstractContextManager[Endpoint]:
    """A Kafka bootstrap address for the whole session."""
    return _endpoint("KAFKA_BOOTSTRAP_SERVERS", _kafka_container,
                     lambda: start_local_kafka(workdir / "kafka"))


def redis_endpoint(workdir: Path) -> AbstractContextManager[Endpoint]:
    """A Redis base URL (no database index) for the whole session."""
    return _endpoint("REDIS_URL", _redis_container, lambda: start_local_redis(workdir / "redis"))
