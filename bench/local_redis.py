"""The services a benchmark runs against: the Redis database given, or one started for it, emptied;
and a Kafka broker given, or the pip broker started for it."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import redis

from sqe.cli.local_services import start_local_redis


def flushed_redis(stack: ExitStack, work: Path, url: str | None) -> str:
    """``url`` (or, without one, a redis-server started in ``work`` and stopped by ``stack``),
    its database flushed; a ``ConnectionError`` names a Redis that cannot be used."""
    if url is None:
        server = start_local_redis(work / "redis")
        stack.callback(server.stop)
        url = f"{server.address}/0"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        raise ConnectionError(f"cannot use Redis at {url}: {exc}") from None
    finally:
        client.close()
    return url


def local_services(stack: ExitStack, work: Path, brokers: str | None, url: str | None
                   ) -> tuple[str, str]:
    """``brokers`` (or, without them, the pip broker started in ``work`` and stopped by
    ``stack``) and :func:`flushed_redis` of ``url``; a ``ConnectionError`` names a Redis that
    cannot be used."""
    from sqe.cli.local_services import start_local_kafka

    if brokers is None:
        kafka = start_local_kafka(work / "kafka")
        stack.callback(kafka.stop)
        brokers = kafka.address
    return brokers, flushed_redis(stack, work, url)
