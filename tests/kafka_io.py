"""Test helpers: produce records to and read whole topics from the real broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

from sqe.kafka_client import CLIENT_DEFAULTS


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def produce(bootstrap: str, topic: str,
            records: Iterable[tuple[bytes | None, bytes | None, int]]) -> None:
    """Produce ``(key, value, partition)`` records in order and wait for every delivery."""
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         **CLIENT_DEFAULTS})
    for key, value, partition in records:
        producer.produce(topic, value=value, key=key, partition=partition,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0
    assert not errors, errors


def read_topic(bootstrap: str, topic: str) -> list[Record]:
    """Every record of ``topic``, by partition then offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, **CLIENT_DEFAULTS})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        out: list[Record] = []
        for p in sorted(meta.partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi <= lo:
                continue
            consumer.assign([TopicPartition(topic, p, lo)])
            got: list[Record] = []
            while not got or got[-1].offset < hi - 1:
                batch = consumer.consume(num_messages=hi - lo - len(got), timeout=5)
                assert batch, f"{topic}/{p}: no records after offset {got[-1].offset if got else lo}"
                for m in batch:
                    assert m.error() is None, m.error()
                    got.append(Record(p, m.offset(), m.key(), m.value()))
            out += got
        return out
    finally:
        consumer.close()


def cluster_id(bootstrap: str, topic: str) -> str | None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meta", **CLIENT_DEFAULTS})
    try:
        return consumer.list_topics(topic, timeout=30).cluster_id
    finally:
        consumer.close()
