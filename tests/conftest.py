"""Session fixtures with real services: Kafka, Redis, Postgres and Spark (see tests/services.py)."""

from __future__ import annotations

import itertools
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from hypothesis import HealthCheck, settings

from sqe.cli.local_services import KAFKA_CLIENT_DEFAULTS, wait_for_kafka
from sqe.engine.spark.prereq import require_java
from sqe.errors import PrerequisiteError
from support.services import Endpoint, kafka_endpoint, postgres_endpoint, redis_endpoint
from support.spark_cluster import CLIENT_JIT, CLIENT_JIT_CONF

# The machine is shared and noisy: no per-example deadlines (speed is measured in bench/).
settings.register_profile(
    "sqe", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200
)
settings.load_profile("sqe")

# The JVMs of the suite with the client JIT compiler only: a test's JVM lives for seconds and
# handles a few records, and the server compiler's work would cost it a third of its CPU and
# never pay off (behaviour does not depend on it; speed is measured in bench/, whose runs
# outside the suite use Java's defaults). PySpark passes PYSPARK_SUBMIT_ARGS to every local
# session's JVM (drivers and their executors); the standalone cluster's master and workers
# read SPARK_DAEMON_JAVA_OPTS, and the tests' own spark-submit commands take CLIENT_JIT_CONF.
# (Not a spark-defaults.conf in SPARK_CONF_DIR: that directory is on the driver's class path,
# and a class path with a non-empty directory has no class archive.)
# Set here, before any JVM starts, so each test worker and every process it starts inherit them.
if "PYSPARK_SUBMIT_ARGS" not in os.environ:
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join([*CLIENT_JIT_CONF, "pyspark-shell"])
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", CLIENT_JIT)


def pytest_sessionstart(session: pytest.Session) -> None:
    try:
        require_java()
    except PrerequisiteError as exc:
        pytest.exit(str(exc), returncode=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first, shared out evenly between the parts of the order.

    xdist's ``worksteal`` gives each of its N workers one N-th of the order, and a worker that
    runs out steals the end of another's queue: with the slow tests at the start of each
    part, every worker starts on them at once and the quick ones even the end out, instead of
    a worker finishing alone with a slow test that happened to come last."""
    workers = config.getoption("numprocesses", None)
    parts = workers if isinstance(workers, int) and workers > 1 else 2
    slow = [item for item in items if item.get_closest_marker("slow")]
    quick = [item for item in items if not item.get_closest_marker("slow")]
    chunks: list[list[pytest.Item]] = [[] for _ in range(parts)]
    for i, item in enumerate(slow):
        chunks[i % parts].append(item)
    size, start, ordered = -(-len(items) // parts), 0, []
    for chunk in chunks:  # each part: its slow tests, then quick ones up to the part's size
        fill = max(0, size - len(chunk))
        ordered += [*chunk, *quick[start:start + fill]]
        start += fill
    items[:] = [*ordered, *quick[start:]]


def _announce(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory, pytestconfig) -> str:
    """Bootstrap servers of a real Kafka-protocol broker, ready for metadata requests."""
    with kafka_endpoint(tmp_path_factory.mktemp("kafka")) as endpoint:
        _announce(pytestconfig, f"\nkafka: {endpoint.address} ({endpoint.provider})")
        wait_for_kafka(endpoint.address)
        yield endpoint.address


@pytest.fixture
def kafka_topic(kafka_bootstrap):
    """Factory: ``kafka_topic(partitions=4)`` creates a fresh topic and returns its name.

    Topics keep records forever (``retention.ms=-1``) so tests may use old timestamps.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def create(partitions: int = 4, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1, config={"retention.ms": "-1"})]
        )
        futures[name].result(timeout=30)
        return name

    return create


@pytest.fixture
def kafka_consumer_conf(kafka_bootstrap) -> dict:
    """Consumer settings that work against every broker the suite may use."""
    return {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": f"test-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        **KAFKA_CLIENT_DEFAULTS,
    }


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory, pytestconfig) -> str:
    """Base URL of a real Redis server for the session."""
    with redis_endpoint(tmp_path_factory.mktemp("redis")) as endpoint:
        _announce(pytestconfig, f"\nredis: {endpoint.address} ({endpoint.provider})")
        yield endpoint.address


@pytest.fixture(scope="session")
def _redis_db_indexes(redis_server):
    base = redis.Redis.from_url(redis_server)
    try:
        count = int(base.config_get("databases").get("databases", 16))
    except redis.ResponseError:  # managed Redis may forbid CONFIG
        count = 16
    finally:
        base.close()
    return itertools.cycle(range(1, count))


@pytest.fixture
def redis_url(redis_server, _redis_db_indexes) -> str:
    """A Redis URL with a database index of its own, emptied before the test."""
    parts = urlsplit(redis_server)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{next(_redis_db_indexes)}", "", ""))
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture(scope="session")
def _postgres_server(pytestconfig) -> Endpoint | str:
    with postgres_endpoint() as endpoint:
        if isinstance(endpoint, Endpoint):
            _announce(pytestconfig, f"\npostgres: {endpoint.provider}")
        yield endpoint


@pytest.fixture
def postgres_dsn(_postgres_server) -> str:
    """A Postgres DSN whose search_path is a schema of its own, dropped after the test."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    if not isinstance(_postgres_server, Endpoint):
        pytest.skip(_postgres_server)
    schema = f"sqe_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_postgres_server.address, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield make_conninfo(_postgres_server.address, options=f"-c search_path={schema}")
    with psycopg.connect(_postgres_server.address, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession (2 shuffle partitions, UI off) built the way the project builds it."""
    from sqe.engine.spark.session import build_session

    session = build_session("sqe-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def installed_sqe(tmp_path_factory, worker_id):
    """SQE as a user installs it: the wheel of this checkout in a fresh virtualenv, with the
    extras the demo and packing need (``local``, ``pack``) and no others; one for all the test
    workers of the run (the tests only read it)."""
    from tests.support.wheel import shared_install

    base = tmp_path_factory.getbasetemp()
    return shared_install(base if worker_id == "master" else base.parent, "local,pack")


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A real Spark Connect server (pyspark's start-connect-server.sh, local[2]) for the
    session; killed by its process group at the end."""
    from support.connect_server import start_connect_server

    server = start_connect_server(tmp_path_factory.mktemp("connect"))
    try:
        yield server
    finally:
        server.kill()
