"""The services a benchmark runs against: the Kafka broker and the Redis database given, or the
pip broker and a redis-server started for the run in its work folder and stopped with it (by
the run's ``ExitStack``), the Redis database flushed; a Spark Connect server likewise.

:func:`with_services` is a benchmark's run around its measurement: a work folder (a temporary one, or
the ``--out`` given), the stack that stops what was started in it, and a failure told as one
``error: ...`` line.  :class:`Services` is what one run's contenders share: the broker, Redis,
the work folder, the Spark Connect server, and the ``sqe run`` and part-script processes run
against them.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from bench.harness import BENCH, BenchError
from bench.harness.processes import Proc, SqeRun, read_progress, run_process, sqe_command
from bench.harness.report import say
from sqe.errors import SqeError

#: What a run tells as one ``error: ...`` line (exit code 1) instead of a traceback.
FAILURES = (BenchError, SqeError, ConnectionError)

T = TypeVar("T")


def with_services(body: Callable[[ExitStack, Path], T], prefix: str = "sqe-bench-",
        out: Path | None = None) -> T | None:
    """``body(stack, work)`` in ``out`` (or a temporary folder named ``prefix...``, removed
    after), every service started on ``stack`` stopped when it returns; None when it failed
    with one of :data:`FAILURES`, which is printed as one ``error: ...`` line."""
    with ExitStack() as stack:
        work = out if out is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix=prefix)))
        try:
            return body(stack, work)
        except FAILURES as exc:
            print(f"error: {exc}", file=sys.stderr)
            return None


def kafka_broker(stack: ExitStack, work: Path, brokers: str | None) -> str:
    """``brokers``, or without them the pip broker started in ``work`` and stopped by
    ``stack``."""
    if brokers is not None:
        return brokers
    from sqe.cli.local_services import start_local_kafka

    kafka = start_local_kafka(work / "kafka")
    stack.callback(kafka.stop)
    return kafka.address


def redis_database(stack: ExitStack, work: Path, url: str | None, flush: bool = True) -> str:
    """``url`` (or, without one, a redis-server started in ``work`` and stopped by ``stack``),
    its database flushed unless not ``flush``; a ``ConnectionError`` names a Redis that cannot
    be used."""
    import redis

    if url is None:
        from sqe.cli.local_services import start_local_redis

        server = start_local_redis(work / "redis")
        stack.callback(server.stop)
        url = f"{server.address}/0"
    if not flush:
        return url
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        raise ConnectionError(f"cannot use Redis at {url}: {exc}") from None
    finally:
        client.close()
    return url


def kafka_and_redis(stack: ExitStack, work: Path, brokers: str | None, url: str | None
                    ) -> tuple[str, str]:
    """:func:`kafka_broker` of ``brokers`` and :func:`redis_database` of ``url``."""
    return kafka_broker(stack, work, brokers), redis_database(stack, work, url)


def connect_server(stack: ExitStack, work: Path) -> str:
    """The URL of a Spark Connect server started in ``work`` (the tests' starter: its Python
    workers run this interpreter) and stopped by ``stack``."""
    from support.connect_server import start_connect_server

    server = start_connect_server(work / "connect")
    stack.callback(server.kill)
    return server.url


def conf_pairs(brokers: str, redis_url: str) -> dict[str, str]:
    """The settings ``sqe run``'s ``--conf`` pairs give for these services, as a mapping (for
    ``sqe.run`` and ``run_topology`` in the benchmark's own process)."""
    from sqe.cli.local_services import service_conf
    from sqe.config.settings import parse_conf_pairs

    return parse_conf_pairs(service_conf(brokers, redis_url)[1::2])


@contextmanager
def redis_client(url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def flush(url: str) -> None:
    with redis_client(url) as client:
        client.flushdb()


class Services:
    """The broker, Redis and working directory every contender of one run uses."""

    def __init__(self, brokers: str, redis_url: str, work: Path,
                 connect: str | None = None) -> None:
        self.brokers, self.redis_url, self.work = brokers, redis_url, work
        self.logs = work / "logs"
        self.connect = connect  # the Spark Connect server of the Connect row (its URL)

    @classmethod
    def start(cls, stack: ExitStack, work: Path, brokers: str | None, url: str | None,
              connect: bool = False, remote: str | None = None) -> Services:
        """:func:`kafka_and_redis` of ``brokers`` and ``url`` in ``work``, and with ``connect``
        the Spark Connect server ``remote`` names, or one started (:func:`connect_server`)."""
        brokers, url = kafka_and_redis(stack, work, brokers, url)
        if connect and not remote:
            remote = connect_server(stack, work)
            say(f"Spark Connect server at {remote}")
        return cls(brokers, url, work, remote if connect else None)

    def sqe_run(self, topology: Path, name: str, checkpoint: Path, *mode: str,
                remote: bool = False, tree: Path | None = None) -> SqeRun:
        """``sqe run`` in a process of its own (over the Connect server when ``remote``; with
        ``tree``'s ``sqe`` when given)."""
        from sqe.cli.local_services import service_conf

        before = len(read_progress(checkpoint))
        if remote:
            assert self.connect is not None
            mode = (*mode, "--remote", self.connect)
        command = sqe_command(topology, *mode, name=name, checkpoint=checkpoint,
                              conf=service_conf(self.brokers, self.redis_url))
        over = " over Spark Connect" if remote else ""
        proc = run_process(command, f"sqe run {topology.name} ({name}){over}", self.logs, tree)
        return SqeRun(proc, read_progress(checkpoint)[before:])

    def script(self, script: str, *args: str, python: str | None = None) -> Proc:
        """``bench/<script>`` run to its end (by ``python``, default this interpreter)."""
        command = [python or sys.executable, str(BENCH / script), *args]
        return run_process(command, f"{script} {args[0]}", self.logs)
