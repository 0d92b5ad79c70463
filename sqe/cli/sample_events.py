"""Sample input for the shipped topologies: JSON events written to a Kafka topic.

``enrich.yaml`` reads objects ``{"event_id", "user", "region", "amount"}``;
:func:`sample_events` makes them deterministically (seeded) and
:func:`produce_events` writes them, creating the topic when it is missing.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.config.kafka_client import error_text, new_producer, producer_conf
from sqe.errors import SourceError

__all__ = ["REGIONS", "sample_events", "produce_events"]

REGIONS = ("eu", "us", "apac", "latam", "mea")


def sample_events(count: int, seed: int = 1, start: int = 0) -> Iterator[dict]:
    """``count`` events with ids ``e<start>``, ``e<start + 1>``, ..."""
    rnd = random.Random(seed + start)
    for i in range(start, start + count):
        yield {"event_id": f"e{i}", "user": f"u{rnd.randrange(1000)}",
               "region": rnd.choice(REGIONS), "amount": rnd.randrange(1, 100)}


def produce_events(brokers: str, topic: str, count: int, partitions: int = 3, seed: int = 1,
                   start: int = 0) -> int:
    """Write ``count`` sample events to ``topic`` (created with ``partitions`` if missing)."""
    admin = AdminClient({"bootstrap.servers": brokers, "log_level": 2})
    try:
        if topic not in admin.list_topics(timeout=30).topics:
            admin.create_topics([NewTopic(topic, partitions, 1,
                                          config={"retention.ms": "-1"})])[topic].result(30)
    except KafkaException as exc:
        raise SourceError(f"cannot create topic {topic} on {brokers}: {error_text(exc)}") from None
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
