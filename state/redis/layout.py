"""Where a Redis state's rows go: the server, and how keys and hash fields are built from fields.

Both Redis states, plain (:mod:`state.redis.sink`) and aggregating
(:mod:`state.redis.aggregates`), join the values of ``keyname.fields`` (and,
for ``datatype: HASH``, of ``fieldname.fields``) with the delimiter, and may
expire what they write; :class:`RedisLayout` holds that, :func:`joined` builds
the joined column with Spark built-ins.  Behind a primary with replicas, a batch's
writes count once the replicas hold them (:func:`replicated`, Redis ``WAIT``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from pyspark.sql import Column
from pyspark.sql import functions as F

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.errors import StateError
from sqe.ledger.replicas import wait_for_replicas
from sqe.wire.columns import field_column

__all__ = ["ACK_TTL_SECONDS", "RedisLayout", "ack_key", "joined", "record_key", "replicated"]

#: How long the key written for WAIT lives (it is written again by every batch).
ACK_TTL_SECONDS = 86_400


@dataclass(frozen=True)
class RedisLayout:
    """A Redis state's server and key layout (what each of its tasks is sent)."""

    name: str  # the state's objectName
    endpoint: RedisEndpoint
    datatype: str  # STRING | HASH
    key_fields: tuple[str, ...]
    hash_fields: tuple[str, ...]
    delimiter: str
    expire_seconds: int

    @property
    def url(self) -> str:
        """The Redis URL of this state, without its password (for messages)."""
        return self.endpoint.display


def joined(parts: Sequence[str | Column], delimiter: str) -> Column:
    """The parts joined by ``delimiter``: a field name as its value's string, a Column as it is."""
    return F.concat_ws(delimiter, *[field_column(p).cast("string") if isinstance(p, str) else p
                                    for p in parts])


def record_key(consumer: str, state: str) -> str:
    """The key of what Redis state ``state`` records of ``consumer``'s batches (its commit
    record; with ``:ack``, the key written for WAIT), in the consumer's hash tag."""
    tag = consumer.replace("{", "(").replace("}", ")")
    return f"sqe:{{{tag}}}:state:{state}"


def ack_key(consumer: str, state: str) -> str:
    """The key written for ``WAIT`` after a batch's writes to Redis state ``state``."""
    return f"{record_key(consumer, state)}:ack"


def replicated(layout: RedisLayout, replicas: int, timeout_s: int, consumer: str,
               batch_id: int) -> None:
    """Return once ``replicas`` replicas of the state's server hold what its primary holds,
    this batch's writes from every task included (:mod:`sqe.ledger.replicas`); a
    :class:`~sqe.errors.ReplicaLagError` when they do not within ``timeout_s``."""
    if replicas <= 0:
        return
    client = layout.endpoint.connect()
    try:
        wait_for_replicas(client, ack_key(consumer, layout.name), batch_id,
                          replicas, timeout_s, ACK_TTL_SECONDS,
                          f"Redis state {layout.name} at {layout.url}: batch {batch_id} of "
                          f"{consumer}")
    except redis.RedisError as exc:
        raise StateError(f"Redis state {layout.name}: {layout.endpoint.describe_error(exc)}; "
                         "the batch fails and is written when it is retried") from None
    finally:
        client.close()
