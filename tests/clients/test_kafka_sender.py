"""The Kafka sender's sentence when librdkafka refuses a record and the flush after it fails
too (a fault only a fake producer can cause on demand: confluent-kafka has raised SystemError
from flush while a broker restarted), and when a broker that lost its producers' state stops
the producer for good (caused for real)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.cli.local_services import free_port, start_local_kafka
from sqe.clients.kafka import RefusedRecord, Sender, producer_conf
from sqe.clients.producers import shared_sender
from support.fault_services import forget_producers
from tests.support.kafka_io import read_topic


class _Refusing:
    def __init__(self, flush_error: Exception | None) -> None:
        self.flush_error = flush_error

    def produce(self, *args, **kwargs) -> None:
        raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))

    def flush(self, timeout: float) -> int:
        if self.flush_error is not None:
            raise self.flush_error
        return 0


@pytest.mark.parametrize("flush_error", [None, SystemError("flush returned NULL")])
def test_a_refused_record_is_said_even_when_the_flush_after_it_fails(flush_error):
    sender = Sender(_Refusing(flush_error))
    with pytest.raises(RefusedRecord) as refused:
        sender.send("t", b"v")
    said = str(refused.value)
    assert "too large" in said
    assert ("the flush after it failed: its flush raised SystemError: flush returned NULL"
            in said) == (flush_error is not None)


class _Stopped:
    """A producer stopped for good whose flush fails inside confluent-kafka (both seen with a
    broker that lost its producers' state, depending on where the fatal error came)."""

    def __init__(self, flush_error: Exception) -> None:
        self.flush_error = flush_error

    def produce(self, *args, **kwargs) -> None:
        raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message"))

    def flush(self, timeout: float) -> int:
        raise self.flush_error


@pytest.mark.parametrize("flush_error", [
    SystemError("<built-in method flush> returned NULL without setting an exception"),
    TypeError("Type confluent_kafka.cimpl.KafkaError doesn't define __format__")])
def test_a_stopped_producer_whose_flush_fails_inside_confluent_kafka_is_a_failed_delivery(
        flush_error):
    sender = Sender(_Stopped(flush_error))
    sender.send("t", b"v")  # not a refused record: the client stopped
    sender.send("t", b"w")  # nothing more is sent
    said = sender.finish(1)
    assert said == (f"the producer stopped for good (its flush raised "
                    f"{type(flush_error).__name__}: {flush_error})")


@pytest.mark.kafka
def test_a_producer_a_broker_forgot_stops_for_good_as_a_delivery_failure_and_is_made_again(
        tmp_path):
    """The broker restarts without its producers' state: the idempotent producer's next
    request is refused (OUT_OF_ORDER_SEQUENCE_NUMBER), which stops librdkafka's producer for
    good.  That is a delivery failure said in one sentence (not a refused record, and not
    confluent-kafka's SystemError from the flush), and the next task's sender is a new
    producer that delivers."""
    port = free_port()
    broker = start_local_kafka(tmp_path / "kafka", port)
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        admin.create_topics([NewTopic("t", 2, 1, config={"retention.ms": "-1"})])["t"].result(30)
        conf = producer_conf(broker.address, {"log_level": 2})
        sender = shared_sender(conf, "test")
        sender.send_many("t", [b"before"] * 100, [None] * 100, [i % 2 for i in range(100)])
        assert sender.finish(30) is None
        broker.stop()
        assert forget_producers(tmp_path / "kafka") == 2
        broker = start_local_kafka(tmp_path / "kafka", port)
        for _ in range(20):  # on, as a task goes on, until the refusal comes back
            sender.send_many("t", [b"lost"] * 50, [None] * 50, [i % 2 for i in range(50)])
            sender.poll(0.1)
        said = sender.finish(30)
        assert said is not None and said.startswith("the producer stopped for good (")
        assert "OUT_OF_ORDER_SEQUENCE_NUMBER" in said and "\n" not in said
        assert sender.stopped is not None and said.count(sender.stopped) == 1
        again = shared_sender(conf, "test")
        assert again is not sender
        again.send_many("t", [b"after"] * 10, [None] * 10, [i % 2 for i in range(10)])
        assert again.finish(30) is None
        values = [r.value for r in read_topic(broker.address, "t")]
        assert values.count(b"before") == 100 and values.count(b"after") == 10
    finally:
        broker.stop()


@pytest.mark.kafka
def test_an_idle_producer_across_a_broker_that_forgot_it_is_made_again_before_it_sends(
        tmp_path):
    """A worker's producer is idle while the broker restarts without its producers' state:
    going on, its next task's requests would be refused and stop it for good (the test above).
    It noted the lost link, so the next task's sender is a new producer, which delivers."""
    port = free_port()
    broker = start_local_kafka(tmp_path / "kafka", port)
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        admin.create_topics([NewTopic("t", 2, 1, config={"retention.ms": "-1"})])["t"].result(30)
        conf = producer_conf(broker.address, {"log_level": 2, "client.id": "idle"})
        sender = shared_sender(conf, "test")
        sender.send_many("t", [b"before"] * 100, [None] * 100, [i % 2 for i in range(100)])
        assert sender.finish(30) is None
        assert shared_sender(conf, "test") is sender  # kept while its link holds
        broker.stop()
        assert forget_producers(tmp_path / "kafka") == 2
        broker = start_local_kafka(tmp_path / "kafka", port)
        again = shared_sender(conf, "test")
        assert again is not sender and sender.link_lost
        for _ in range(5):
            again.send_many("t", [b"after"] * 50, [None] * 50, [i % 2 for i in range(50)])
            again.poll(0.1)
        assert again.finish(30) is None
        values = [r.value for r in read_topic(broker.address, "t")]
        assert values.count(b"before") == 100 and values.count(b"after") == 250
    finally:
        broker.stop()
