"""The Kafka sender's sentence when librdkafka refuses a record and the flush after it fails
too (a fault only a fake producer can cause on demand: confluent-kafka has raised SystemError
from flush while a broker restarted)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from sqe.clients.kafka import RefusedRecord, Sender


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
    assert ("the flush after it failed: flush returned NULL" in said) == (flush_error is not None)
