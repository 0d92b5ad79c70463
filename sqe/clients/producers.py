"""This process's Kafka producers, kept between Spark tasks and made ahead of their first use.

Spark reuses its Python workers across tasks and batches, so a state's task takes the
process's producer for its settings (:func:`shared_sender`) instead of making one per task.
A new idempotent producer delivers nothing in its first half second: librdkafka asks for
its producer id on a timer that first fires 500 ms after the client is made
(``rd_kafka_idemp_init``, ``src/rdkafka_idempotence.c``), whatever else it did before.  A
batch's source read and its one pass run in two Python workers that Spark hands out the
other way round in the next batch, so the first batch in which a worker writes a Kafka state
waited those 500 ms in its flush.  :func:`make_ahead` (called by the source's read with the
producers the stream's states will use) makes them at a worker's first task of any kind, so
the producer id is there when the worker first writes.  A kept producer that lost its link to
the brokers is made again before it writes (a broker back without its producers' state
would refuse its sequence numbers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqe.clients.kafka import Sender

__all__ = ["drop_sender", "make_ahead", "shared_sender"]

#: This process's senders, by their producer settings (made on first use or ahead of it).
_SENDERS: dict[str, Sender] = {}


def _key(conf: Mapping[str, Any]) -> str:
    return json.dumps(conf, sort_keys=True, default=str)


def shared_sender(conf: Mapping[str, Any], role: str) -> Sender:
    """This process's sender for producer settings ``conf`` (``role`` names it in the client
    log), with no failure noted: made now if it was not made before, and made again when the
    last stopped for good or lost its link to the brokers since it was made.

    A broker that restarts may come back without its producers' state; an idempotent
    producer that goes on with its sequence numbers is then refused and stops for good,
    failing the task that uses it.  A new producer starts a new sequence, so only the tasks
    that were writing across the restart fail, not each idle producer's next one."""
    key = _key(conf)
    sender = _SENDERS.get(key)
    if sender is not None:
        sender.poll(0)  # what came while it was idle: a lost link, or its fatal error
    if sender is None or sender.stopped is not None or sender.link_lost:
        sender = _SENDERS[key] = Sender.start(conf, role)
    sender.failures.clear()
    return sender


def make_ahead(producers: Mapping[str, Mapping[str, Any]]) -> None:
    """Make this process's sender of each role's producer settings (role -> settings) that
    it does not have yet, without waiting for it: the producer gets its id meanwhile."""
    for role, conf in producers.items():
        if _key(conf) not in _SENDERS:
            shared_sender(conf, role)


def drop_sender(conf: Mapping[str, Any]) -> None:
    """Forget the sender of ``conf`` after a failed task, purging what it still queues (it
    must not reach the next task's flush)."""
    sender = _SENDERS.pop(_key(conf), None)
    if sender is not None:
        sender.producer.purge()
        sender.flush(0)  # a producer stopped for good raises from its flush: noted there
