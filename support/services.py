"""How the test suite finds a real Kafka broker and a real Redis.

Each service is chosen in this order:

1. the environment (``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``,
   ``POSTGRES_DSN``), so the same tests run against real clusters;
2. a testcontainers container, when a Docker engine answers;
3. a local process started from an installed binary (the pip broker
   ``noida-db``, ``redis-server``), stopped by PID at the end of the session;
   for Postgres, the local server on 127.0.0.1:5432 when one answers
   (``.ci/run`` starts an installed but stopped one), else the Postgres tests
   are skipped with that reason.

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

from sqe.cli.local_services import LocalService, start_local_kafka, start_local_redis


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


LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


def _postgres_answers(dsn: str) -> str | None:
    """None when ``dsn`` accepts a connection, else why not."""
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


@contextmanager
def postgres_endpoint() -> Iterator[Endpoint | str]:
    """A Postgres DSN for the whole session, or the reason there is none (a str)."""
    env = os.environ.get("POSTGRES_DSN")
    if env:
        yield Endpoint(env, "POSTGRES_DSN")
        return
    if docker_engine_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield Endpoint(container.get_connection_url(), "testcontainers")
        return
    why = _postgres_answers(LOCAL_POSTGRES)
    if why is None:
        yield Endpoint(LOCAL_POSTGRES, "local server on 127.0.0.1:5432")
        return
    yield (f"no POSTGRES_DSN, no Docker engine, and the local server does not answer "
           f"({why})")
