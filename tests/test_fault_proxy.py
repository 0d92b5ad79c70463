"""The tests' fault proxy in front of a real broker: every client connection passes it, and
a produce whose reply it loses is retried by the idempotent producer without a duplicate."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support.fault_proxy import _Frames
from support.fault_services import ProxiedKafka


def test_frames_pass_through_in_pieces_and_hold_only_a_frame_to_change() -> None:
    first = (12).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"xx127.0."  # not held
    held = (13).to_bytes(4, "big") + (9).to_bytes(4, "big") + b"127.0.0.2"
    frames = _Frames(8, lambda head: (lambda f: f.replace(b"127.0.0.2", b"127.0.0.1"))
                     if head[4:8] == (9).to_bytes(4, "big") else None)
    stream = first + held
    pieces = [p for i in range(0, len(stream), 5) for p in frames.feed(stream[i:i + 5])]
    assert b"".join(p for p, _ in pieces) == first + held.replace(b".2", b".1")
    assert [h for _, h in pieces if h is not None] == [first[:8], held[:8]]


@pytest.mark.kafka
def test_the_proxy_carries_every_connection_and_a_lost_produce_reply_doubles_nothing(
        tmp_path) -> None:
    kafka = ProxiedKafka(tmp_path / "kafka")
    try:
        kafka.start()
        admin = AdminClient({"bootstrap.servers": kafka.address})
        brokers = admin.list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", kafka.port)]
        admin.create_topics([NewTopic("t", 1, 1)])[("t")].result(10)
        producer = Producer({"bootstrap.servers": kafka.address, "enable.idempotence": True,
                             "linger.ms": 0})
        producer.produce("t", b"before")
        assert producer.flush(20) == 0
        kafka.proxy.lose_reply_to(0)  # the next Produce is written; its reply never comes
        producer.produce("t", b"lost reply")
        assert producer.flush(60) == 0
        assert kafka.proxy.replies_lost == 1
        kafka.proxy.blackhole(1.0)
        producer.produce("t", b"after the dark")
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": kafka.address, "group.id": "g",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        values, deadline = [], time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(10, 1) if not m.error()]
        consumer.close()
        assert values == [b"before", b"lost reply", b"after the dark"]
    finally:
        kafka.stop()


@pytest.mark.kafka
def test_a_broker_restart_keeps_every_record_it_acknowledged(tmp_path) -> None:
    """The nemesis's broker restart must not lose what the broker acknowledged (a Kafka broker
    does not): stopped with its clients still sending, the pip broker lost about 10 of them."""
    kafka = ProxiedKafka(tmp_path / "kafka")
    acked: set[bytes] = set()
    failed: list[str] = []
    sending = threading.Event()

    def delivered(err, msg) -> None:
        (failed.append(str(err)) if err is not None else acked.add(msg.value()))

    def send(producer: Producer) -> None:  # a steady producer, on through the restart
        sent = 0
        while sending.is_set():
            producer.produce("t", str(sent).encode(), partition=sent % 4, on_delivery=delivered)
            producer.poll(0)
            sent += 1
            time.sleep(0.0005)

    try:
        kafka.start()
        admin = AdminClient({"bootstrap.servers": kafka.address})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(10)
        producer = Producer({"bootstrap.servers": kafka.address, "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000})
        sending.set()
        thread = threading.Thread(target=send, args=(producer,))
        thread.start()
        time.sleep(2.0)
        kafka.shut()
        before = len(acked)
        time.sleep(3.0)  # the broker away, as the nemesis holds it
        kafka.start()
        time.sleep(2.0)
        sending.clear()
        thread.join()
        producer.flush(60)
        assert failed == [] and before > 0
        consumer = Consumer({"bootstrap.servers": kafka.address, "group.id": "g",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", p, 0) for p in range(4)])
        kept: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(kept) < len(acked) and time.monotonic() < deadline:
            kept |= {m.value() for m in consumer.consume(1000, 1) if not m.error()}
        consumer.close()
        assert sorted(int(v) for v in acked - kept)[:10] == []
    finally:
        kafka.stop()
