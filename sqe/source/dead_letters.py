"""Dead letters: chunk records that cannot be decoded, sent as they were to a topic of their own.

Under ``jw.sqe.spout.kafka.corruptChunkPolicy: deadletter`` a source task sends
each record it cannot decode to ``deadLetterTopic`` on the stream's own
brokers (with the stream's connection properties), with the headers
:data:`~sqe.wire.headers.DEAD_LETTER_SOURCE` (``topic/partition/offset``) and
:data:`~sqe.wire.headers.DEAD_LETTER_REASON`, and goes on.
"""

from __future__ import annotations

from typing import Any

from sqe.config.kafka_client import (
    RefusedRecord,
    Sender,
    connection_properties,
    new_producer,
    producer_conf,
)
from sqe.errors import SourceError
from sqe.source.config import SourceConfig
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE

__all__ = ["DeadLetters"]


class DeadLetters:
    """Sends undecodable chunk records, as they were, to the dead-letter topic.

    Each dead letter carries :data:`DEAD_LETTER_SOURCE` (``topic/partition/offset``)
    and :data:`DEAD_LETTER_REASON` headers.  The producer is made on first use;
    :meth:`finish` flushes it and fails the task when a dead letter was not
    acknowledged, so a corrupt record is never lost without trace (a retried
    batch may send the same dead letter twice).
    """

    def __init__(self, cfg: SourceConfig) -> None:
        self.cfg = cfg
        self.sender: Any = None

    def send(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None, reason: str) -> None:
        target = str(self.cfg.stream.dead_letter_topic)
        if self.sender is None:
            conf = producer_conf(self.cfg.stream.bootstrap,
                                 connection_properties(self.cfg.stream.consumer_properties))
            self.sender = Sender(new_producer(conf, "dead letters"))
        headers = [(DEAD_LETTER_SOURCE, f"{topic}/{partition}/{offset}".encode()),
                   (DEAD_LETTER_REASON, reason.encode("utf-8"))]
        try:
            self.sender.send(target, value, key, -1, headers)
        except RefusedRecord as exc:
            raise SourceError(f"the corrupt chunk at {topic}/{partition} offset {offset} could "
                              f"not go to the dead-letter topic {target}: {exc}") from None

    def finish(self) -> None:
        """Wait for every dead letter to be acknowledged."""
        if self.sender is None:
            return
        problem = self.sender.finish()
        if problem:
            raise SourceError(f"dead letters to {self.cfg.stream.dead_letter_topic} on "
                              f"{self.cfg.stream.bootstrap} were not delivered ({problem}); the batch "
                              "fails and is read again")
