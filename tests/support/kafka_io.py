"""Test helpers: produce records to and read whole topics from the real broker, and a
topology that copies one topic to another through the replay filter."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer

from sqe.clients.kafka import CLIENT_DEFAULTS, read_all


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
    return [Record(m.partition(), m.offset(), m.key(), m.value())
            for m in read_all(bootstrap, topic)]


def cluster_id(bootstrap: str, topic: str) -> str | None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meta", **CLIENT_DEFAULTS})
    try:
        return consumer.list_topics(topic, timeout=30).cluster_id
    finally:
        consumer.close()


def filtered_copy(path: Path, source: str, dest: str, max_records: int) -> Path:
    """Write at ``path`` a topology whose stream ``In`` reads ``source`` with filterReplays
    (at most ``max_records`` a batch) and copies each value to ``dest`` with its key."""
    commands = [
        {"CreateStream": {"streamName": "In", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "identity",
                          "options": {"jw.sqe.spout.kafka.filterReplays": True,
                                      "jw.sqe.spout.kafka.maxRecordsPerBatch": max_records}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": ["v"],
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": ["_value"]}, "from": {"objectName": "In"}}},
    ]
    path.write_text(yaml.safe_dump(commands))
    return path
