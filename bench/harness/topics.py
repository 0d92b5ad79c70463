"""Kafka topics as the benchmarks use them: made fresh with a unique name and their records
kept (:func:`create_topic`), filled before a measurement (:func:`fill`), counted after one
(:func:`topic_size`, :func:`committed_records`), and fed the sample events ``e0, e1, ...`` at a
steady rate by a thread (:class:`EventWriter`).  What goes wrong is a
:class:`~bench.harness.BenchError` of one sentence."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from bench.harness import BenchError

PARTITIONS = 4  # the partitions of the chain's topics


def create_topic(brokers: str, prefix: str, partitions: int = PARTITIONS,
                 admin: Any = None) -> str:
    """A fresh topic ``<prefix>-<8 hex digits>`` that keeps its records (``retention.ms=-1``),
    made by ``admin`` (default: a new admin client)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from sqe.clients.kafka import error_text

    if admin is None:
        admin = AdminClient({"bootstrap.servers": brokers, "log_level": 2})
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})]
                            )[topic].result(30)
    except KafkaException as exc:
        raise BenchError(f"cannot create topic {topic} on {brokers}: {error_text(exc)}") from None
    return topic


def fill(brokers: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int]]
         ) -> None:
    """Write ``(key, value, partition)`` records to ``topic`` in order (an idempotent producer,
    ``linger.ms`` 50) and wait until every one is acknowledged."""
    from confluent_kafka import Producer

    from sqe.clients.kafka import Sender, producer_conf

    sender = Sender(Producer(producer_conf(brokers, {"linger.ms": 50})))
    for key, value, partition in records:
        sender.send(topic, value, key, partition)
    problem = sender.finish()
    if problem:
        raise BenchError(f"could not write the benchmark topic {topic}: {problem}")


def topic_size(brokers: str, topic: str) -> int:
    """Offsets used in ``topic`` (records, plus transaction markers where there are any)."""
    from confluent_kafka import Consumer, TopicPartition

    from sqe.clients.kafka import consumer_conf

    client = Consumer(consumer_conf(brokers, "bench-size", quiet=True))
    try:
        parts = client.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for p in parts:
            lo, hi = client.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += hi - lo
        return int(total)
    finally:
        client.close()


def committed_records(brokers: str, topic: str, timeout: float = 120.0) -> int:
    """Records a ``read_committed`` consumer sees in ``topic``, read to the end of every
    partition (transaction markers take offsets but are no records)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from sqe.clients.kafka import consumer_conf

    client = Consumer(consumer_conf(brokers, "bench-count", {
        "isolation.level": "read_committed", "enable.partition.eof": True}, quiet=True))
    try:
        parts = client.list_topics(topic, timeout=30).topics[topic].partitions
        client.assign([TopicPartition(topic, p, 0) for p in parts])
        at_end: set[int] = set()
        seen, deadline = 0, time.monotonic() + timeout
        while len(at_end) < len(parts) and time.monotonic() < deadline:
            for m in client.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    seen += 1
                    at_end.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF and (p := m.partition()) is not None:
                    at_end.add(p)
        if len(at_end) < len(parts):
            raise BenchError(f"counting {topic}: the end of every partition was not reached in "
                             f"{timeout:.0f} s")
        return seen
    finally:
        client.close()


class EventWriter(threading.Thread):
    """Writes the sample events ``e0, e1, ...`` to ``topic`` at ``rate`` per second for
    ``seconds`` (in a thread: :meth:`start`; :attr:`halt` ends it early).  ``sent`` counts
    them; a failure ends it, said in :attr:`error`."""

    def __init__(self, brokers: str, topic: str, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.brokers, self.topic, self.rate, self.seconds = brokers, topic, rate, seconds
        self.sent, self.halt = 0, threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        from sqe.cli.sample_events import sample_events
        from sqe.clients.kafka import Sender, producer_conf

        try:
            sender = Sender.start(producer_conf(self.brokers, {"log_level": 2}), "soak events")
            events, start = sample_events(10**12), time.monotonic()  # the first n: sample_events(n)
            while not self.halt.wait(0.05) and time.monotonic() - start < self.seconds:
                n = int(self.rate * (time.monotonic() - start)) - self.sent
                sender.send_many(self.topic, [json.dumps(next(events)).encode() for _ in range(n)],
                                 [None] * n, [-1] * n)
                self.sent += n
                sender.producer.poll(0)
            problem = sender.finish(60)
            self.error = f"the producer: {problem}" if problem else None
        except Exception as exc:  # reported as one sentence
            self.error = f"the producer failed: {exc}"
