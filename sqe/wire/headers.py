"""The Kafka record headers SQE writes and reads.

* :data:`FILTER_HEADER` carries a message's filter value when chunking is off
  (with chunking, the value is in the chunk body and the chunk's Bloom filter).
* :data:`DEAD_LETTER_SOURCE` and :data:`DEAD_LETTER_REASON` go with a record sent
  to a dead-letter topic: where it was (``topic/partition/offset``) and why it
  could not be read.
"""

from __future__ import annotations

__all__ = ["DEAD_LETTER_REASON", "DEAD_LETTER_SOURCE", "FILTER_HEADER"]

#: The record header that carries a message's filter value when chunking is off.
FILTER_HEADER = "sqe-filter-value"

#: Where a dead letter was read: ``topic/partition/offset``.
DEAD_LETTER_SOURCE = "sqe-dead-letter-source"

#: Why a dead letter could not be read.
DEAD_LETTER_REASON = "sqe-dead-letter-reason"
