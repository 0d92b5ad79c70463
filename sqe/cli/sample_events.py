"""Sample input for the shipped topologies: JSON events written to a Kafka topic.

``enrich.yaml`` reads objects ``{"event_id", "user", "region", "amount"}``;
:func:`sample_events` makes them deterministically (seeded) and
:func:`produce_events` writes them, creating the topic when it is missing (with
another writer creating it at the same time: :func:`ensure_topic`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.clients.kafka import error_text, new_producer, producer_conf
from sqe.errors import SourceError

__all__ = ["REGIONS", "ensure_topic", "sample_events", "produce_events"]

REGIONS = ("eu", "us", "apac", "latam", "mea")


def sample_events(count: int, seed: int = 1, start: int = 0) -> Iterator[dict]:
    """``count`` events with ids ``e<start>``, ``e<start + 1>``, ..."""
    rnd = random.Random(seed + start)
    for i in range(start, start + count):
        yield {"event_id": f"e{i}", "user": f"u{rnd.randrange(1000)}",
               "region": rnd.choice(REGIONS), "amount": rnd.randrange(1, 100)}


def ensure_topic(brokers: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` when it is missing.

    Two writers may do so at once: the one the brokers answer ``TOPIC_ALREADY_EXISTS``
    looks again and goes on when the topic is there, with partitions and no error.
    """
    admin = AdminClient({"bootstrap.servers": brokers, "log_level": 2})
    try:
        if topic in admin.list_topics(timeout=30).topics:
            return
        admin.create_topics([NewTopic(topic, partitions, 1,
                                      config={"retention.ms": "-1"})])[topic].result(30)
        return
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError) or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise SourceError(f"cannot create topic {topic} on {brokers}: "
                              f"{error_text(exc)}") from None
    deadline = time.monotonic() + 30  # another writer created it meanwhile: wait to see it
    while True:
        try:
            meta = admin.list_topics(topic, timeout=30).topics.get(topic)
        except KafkaException as exc:
            raise SourceError(f"topic {topic} on {brokers}, which another writer created at "
                              f"the same time, cannot be read: {error_text(exc)}") from None
        if meta is not None and meta.error is None and meta.partitions:
            return
        if time.monotonic() > deadline:
            raise SourceError(
                f"topic {topic} on {brokers} was created by another writer at the same time, "
                "but within 30 s its metadata still show "
                f"{error_text(meta.error) if meta and meta.error else 'no partitions'}")
        time.sleep(0.2)


def produce_events(brokers: str, topic: str, count: int, partitions: int = 3, seed: int = 1,
                   start: int = 0) -> int:
    """Write ``count`` sample events to ``topic`` (created with ``partitions`` if missing)."""
    ensure_topic(brokers, topic, partitions)
    failures: list[str] = []
    producer = new_producer(producer_conf(brokers), "sample events")
    for event in sample_events(count, seed, start):
        while True:
            try:
                producer.produce(topic, json.dumps(event).encode(), on_delivery=lambda e, m: (
                    failures.append(error_text(e)) if e is not None else None))
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    if failures or left:
        raise SourceError(f"writing sample events to {topic} on {brokers} failed: "
                          f"{failures[0] if failures else f'{left} not acknowledged'}")
    return count
