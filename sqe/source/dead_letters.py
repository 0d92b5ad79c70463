"""Dead letters: records a stream cannot take, sent as they were to a topic of their own.

Under ``jw.sqe.spout.kafka.corruptChunkPolicy: deadletter`` (a chunk that cannot
be decoded) or ``badRecordPolicy: deadletter`` (a record a step cannot take: a key
beyond ``filterReplays.maxAdvance``, a value that does not decode, a value a query
cannot cast or a store cannot hold), each such record goes to
``deadLetterTopic`` on the stream's own brokers (with the stream's connection
properties) with its key and value unchanged and the headers
:data:`~sqe.wire.headers.DEAD_LETTER_SOURCE` (``topic/partition/offset``) and
:data:`~sqe.wire.headers.DEAD_LETTER_REASON`, and the batch goes on.

A batch that is run again (a failure before its commit) sends its dead letters
again: a copy carries the same key and the same source position header, which is
unique per record, so a reader of the dead-letter topic tells copies apart by it.
"""

from __future__ import annotations

from sqe.clients.kafka import RefusedRecord, Sender, connection_properties, producer_conf
from sqe.clients.producers import make_ahead, shared_sender
from sqe.config.views import StreamSettings
from sqe.errors import SourceError
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE

__all__ = ["DeadLetters"]


class DeadLetters:
    """Sends rejected records, as they were, to the dead-letter topic.

    Each dead letter carries :data:`DEAD_LETTER_SOURCE` (``topic/partition/offset``)
    and :data:`DEAD_LETTER_REASON` headers.  The producer is the process's own
    (:mod:`sqe.clients.producers`), made ahead when the first ``DeadLetters`` of the
    process is, so a task's first dead letter does not wait for the idempotent producer's
    id; :meth:`finish` flushes it and fails the task when a dead letter was not
    acknowledged, so a corrupt record is never lost without trace (a retried batch may
    send the same dead letter twice).
    """

    ROLE = "dead letters"

    def __init__(self, stream: StreamSettings) -> None:
        self.stream = stream
        self.conf = producer_conf(stream.bootstrap,
                                  connection_properties(stream.consumer_properties))
        self.sender: Sender | None = None
        make_ahead({self.ROLE: self.conf})

    def send(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None, reason: str) -> None:
        target = str(self.stream.dead_letter_topic)
        if self.sender is None:
            self.sender = shared_sender(self.conf, self.ROLE)
        headers = [(DEAD_LETTER_SOURCE, f"{topic}/{partition}/{offset}".encode()),
                   (DEAD_LETTER_REASON, reason.encode("utf-8"))]
        try:
            self.sender.send(target, value, key, -1, headers)
        except RefusedRecord as exc:
            raise SourceError(f"the record at {topic}/{partition} offset {offset} ({reason}) "
                              f"could not go to the dead-letter topic {target}: {exc}") from None

    def finish(self) -> None:
        """Wait for every dead letter to be acknowledged."""
        if self.sender is None:
            return
        problem = self.sender.finish()
        if problem:
            raise SourceError(f"dead letters to {self.stream.dead_letter_topic} on "
                              f"{self.stream.bootstrap} were not delivered ({problem}); the batch "
                              "fails and is read again")
