"""Kafka client settings shared by the source and the Kafka state.

Both sides build confluent-kafka clients from the same pieces: the bootstrap
list, SQE's defaults and the user's own librdkafka settings.  The defaults:

* ``receive.message.max.bytes`` is raised so a broker that ignores fetch-size
  limits (some Kafka-protocol brokers do) cannot fail a fetch; on Apache Kafka
  it is only an upper bound.
* Consumers never commit offsets to Kafka and never reset silently: offsets
  live in Spark's checkpoint, and a range that retention deleted is an error
  (``auto.offset.reset=error``), not a silent jump.
* Producers are idempotent (``enable.idempotence=true``), so order per
  partition holds across the client's internal retries, as the
  replay filter downstream requires of a writer.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sqe.errors import SourceError
from sqe.logs import kafka_logger
from sqe.secrets import mask_value, scrub

__all__ = ["CLIENT_DEFAULTS", "CLIENT_LOG_ENV", "FLUSH_TIMEOUT", "RefusedRecord", "Sender",
           "bootstrap", "check_properties", "connection_properties", "consumer_conf",
           "producer_conf", "new_consumer", "new_producer", "error_text", "cluster_metadata",
           "topic_partitions", "read_all"]

#: When set, every client SQE builds appends its settings (secrets masked) as a JSON line to
#: this file: a diagnostic of what each consumer and producer was built with, executors included.
CLIENT_LOG_ENV = "SQE_KAFKA_CLIENT_LOG"

#: Property prefixes about reaching and authenticating to the brokers: what a producer that
#: writes to a stream's own cluster (its dead letters) takes from the stream's consumer settings.
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "socket.", "client.", "broker.",
                        "reconnect.", "metadata.", "api.version", "resolve.", "retry.backoff")

CLIENT_DEFAULTS: dict[str, Any] = {"receive.message.max.bytes": 200_000_000}
#: Seconds a producer may take to have every queued record acknowledged.
FLUSH_TIMEOUT = 120.0


def bootstrap(brokers: str | Iterable[str]) -> str:
    """The comma-separated bootstrap string of a broker list (or of one already joined)."""
    if isinstance(brokers, str):
        return ",".join(b.strip() for b in brokers.split(",") if b.strip())
    return ",".join(b.strip() for b in brokers)


def consumer_conf(brokers: str | Iterable[str], group: str,
                  extra: Mapping[str, Any] | None = None, quiet: bool = False) -> dict[str, Any]:
    """Settings of a consumer that reads assigned ranges and commits nothing to Kafka.

    ``quiet`` silences librdkafka's own connection-error log lines, for clients
    whose failures the caller reports itself as one sentence.
    """
    return {
        **({"log_level": 2} if quiet else {}),
        "bootstrap.servers": bootstrap(brokers),
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "error",
        **CLIENT_DEFAULTS,
        **(extra or {}),
    }


def producer_conf(brokers: str | Iterable[str],
                  extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Settings of an idempotent producer (order per partition holds across retries)."""
    return {
        "bootstrap.servers": bootstrap(brokers),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        **CLIENT_DEFAULTS,
        **(extra or {}),
    }


def connection_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a client's properties that says how to reach and log in to the brokers."""
    return {k: v for k, v in properties.items() if k.startswith(_CONNECTION_PREFIXES)}


def check_properties(role: Literal["consumer", "producer"],
                     properties: Mapping[str, Any]) -> str | None:
    """What librdkafka refuses in ``properties`` for a ``role`` client, or ``None``.

    The client is built (no connection is made without ``bootstrap.servers``),
    so unknown names, bad values and unreadable certificate files are all
    found here rather than on an executor.  Secret values never appear in the text.
    """
    conf = {**properties, "log_level": 0}
    try:
        if role == "consumer":
            Consumer({**conf, "group.id": "sqe-validate"}).close()
        else:
            Producer(conf).flush(0)
    except KafkaException as exc:
        return scrub(error_text(exc), [str(v) for k, v in properties.items()
                                       if mask_value(k, v) != v])
    return None


def _logged(client: Any, kind: str, role: str, conf: Mapping[str, Any]) -> Any:
    path = os.environ.get(CLIENT_LOG_ENV)
    if path:
        line = {"client": kind, "role": role, "pid": os.getpid(),
                "conf": {k: mask_value(k, v) for k, v in conf.items()}}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line, default=str) + "\n")
    return client


def new_consumer(conf: Mapping[str, Any], role: str) -> Any:
    """A confluent-kafka ``Consumer`` built with ``conf`` (``role`` names it in the client log);
    librdkafka's own lines go to :func:`~sqe.logs.kafka_logger`."""
    return _logged(Consumer({**conf, "logger": kafka_logger()}), "consumer", role, conf)


def new_producer(conf: Mapping[str, Any], role: str) -> Any:
    """A confluent-kafka ``Producer`` built with ``conf`` (``role`` names it in the client log);
    librdkafka's own lines go to :func:`~sqe.logs.kafka_logger`."""
    return _logged(Producer({**conf, "logger": kafka_logger()}), "producer", role, conf)


class Sender:
    """Produces records and remembers delivery failures, so nothing fails unnoticed.

    :meth:`send` (one record) and :meth:`send_many` (columns of records) wait while
    the local queue is full and raise :class:`RefusedRecord` when the client refuses
    a record outright (too large, unknown topic); :meth:`finish` flushes and returns
    what went wrong as one sentence, or ``None`` when every record was acknowledged.

    A producer that stops for good (librdkafka's fatal error: an idempotent producer out of
    step with a broker that lost its producers' state, OUT_OF_ORDER_SEQUENCE_NUMBER) is a
    delivery failure, not a refused record: it is noted first in :attr:`failures`,
    :attr:`stopped` says it, and the sender sends nothing more.  A sender made by
    :meth:`start` also notes when its link to the brokers was lost (:attr:`link_lost`): a
    broker that came back may have lost its producers' state, which an idle producer finds
    only with its next request, by stopping for good.

    ``Sender(producer)`` asks a delivery report of every record;
    :meth:`Sender.start` makes a producer that reports failures only
    (``delivery.report.only.error``, one callback for the producer): no Python call per
    acknowledged record, which doubles what one task writes per second.
    """

    def __init__(self, producer: Any, reports_all: bool = True) -> None:
        self.producer = producer
        self.failures: list[str] = []
        #: the producer's fatal error, once it has stopped for good; None while it works
        self.stopped: str | None = None
        #: whether the producer lost its link to the brokers (seen by :meth:`poll`)
        self.link_lost = False
        self._per_record = {"on_delivery": self._on_delivery} if reports_all else {}

    @classmethod
    def start(cls, conf: Mapping[str, Any], role: str) -> Sender:
        """A sender with a new producer of ``conf`` that reports failed deliveries only."""
        sender = cls(None, reports_all=False)
        sender.producer = new_producer({**conf, "delivery.report.only.error": True,
                                        "on_delivery": sender._on_delivery,
                                        "error_cb": sender._on_error}, role)
        return sender

    def _on_error(self, err: Any) -> None:
        if err.code() in LINK_LOST:
            self.link_lost = True

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and len(self.failures) < 5:
            self.failures.append(f"{msg.topic()}/{msg.partition()}: {error_text(err)}")

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int = -1, headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue one record (partition -1: the producer's partitioner decides)."""
        self.send_many(topic, [value], [key], [partition], [headers])

    def send_many(self, topic: str, values: Sequence[bytes | None],
                  keys: Sequence[bytes | None], partitions: Sequence[int],
                  headers: Sequence[list[tuple[str, bytes]] | None] | None = None) -> None:
        """Queue records given as columns, in order (partition -1: the producer decides)."""
        if self.stopped is not None:
            return  # said in failures already; the batch fails at finish()
        produce, extra = self.producer.produce, self._per_record
        try:
            for value, key, partition, header in zip(
                    values, keys, partitions,
                    headers if headers is not None else [None] * len(values), strict=True):
                while True:
                    try:
                        produce(topic, value=value, key=key, partition=partition,
                                headers=header, **extra)
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        self.poll(0.1)
                        if self.stopped is not None:  # said in failures; fails at finish()
                            return
        except KafkaException as exc:  # refused before sending (e.g. too large), or stopped
            refused = error_text(exc)
            self.flush(FLUSH_TIMEOUT)
            if _fatal(exc):
                self._stop(refused)  # (the flush may have said why already)
                return
            if self.stopped is not None:  # the refusal stays the news; the flush's beside it
                raise RefusedRecord(f"{refused} (and the flush after it failed: "
                                    f"{self.stopped})") from None
            raise RefusedRecord(refused) from None

    def poll(self, timeout: float = 0.0) -> None:
        """Serve the delivery reports that arrived (see :meth:`flush` for a stopped producer)."""
        self._served(self.producer.poll, timeout)

    def flush(self, timeout: float) -> int:
        """Flush: the records still queued.  A producer stopped for good raises from its poll
        and flush: its fatal error, or that inside a ``SystemError``, or -- confluent-kafka's
        own handling of it failing -- a ``SystemError`` ("returned NULL without setting an
        exception") or ``TypeError`` ("KafkaError doesn't define __format__") of its own.  It
        is noted (:attr:`stopped`): the client is of no more use, and nothing is left to wait
        for."""
        return self._served(self.producer.flush, timeout)

    def _served(self, serve: Any, timeout: float) -> int:
        try:
            return int(serve(timeout))
        except (KafkaException, SystemError, TypeError) as exc:
            inner = exc if isinstance(exc, KafkaException) else exc.__cause__
            self._stop(error_text(inner) if isinstance(inner, KafkaException) else
                       f"its {getattr(serve, '__name__', 'call')} raised {type(exc).__name__}: "
                       f"{exc}")
            return 0

    def _stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
            self.failures.insert(0, f"the producer stopped for good ({reason})")

    def finish(self, timeout: float = FLUSH_TIMEOUT) -> str | None:
        """Flush; the delivery problems as one sentence, or ``None``."""
        remaining = self.flush(timeout)
        if self.failures:
            return "; ".join(dict.fromkeys(self.failures))  # each problem once
        if remaining:
            return f"{remaining} record(s) not acknowledged within {timeout:.0f} s"
        return None


#: librdkafka's errors for a lost link to a broker (reported to ``error_cb``, not raised).
LINK_LOST = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


def _fatal(exc: KafkaException) -> bool:
    """Whether librdkafka's client raised ``exc`` because it stopped for good."""
    inner = exc.args[0] if exc.args else None
    return isinstance(inner, KafkaError) and (inner.fatal() or inner.code() == KafkaError._FATAL)


class RefusedRecord(Exception):
    """The client refused a record before sending it; the text says why."""


def error_text(err: object) -> str:
    """A one-line description of a ``KafkaError`` (or any exception carrying one)."""
    inner = err.args[0] if isinstance(err, Exception) and err.args else err
    describe = getattr(inner, "str", None)
    name = getattr(inner, "name", None)
    if callable(describe):
        text = describe()
        return f"{name()}: {text}" if callable(name) else text
    return str(inner)


def cluster_metadata(client: Any, topic: str, brokers: str, error: type[Exception],
                     role: str, timeout: float = 30.0) -> Any:
    """The brokers' metadata of ``topic`` (``.cluster_id``, ``.topics``), or ``error``.

    ``client`` is any confluent-kafka client; ``role`` says what the caller
    is, e.g. ``"Kafka source"``, and starts the error message; brokers that do not
    answer within ``timeout`` seconds are that error.
    """
    try:
        return client.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise error(f"{role} {topic}: cannot reach the Kafka brokers {brokers} within "
                    f"{timeout:.0f} s: {error_text(exc)}") from None


def topic_partitions(client: Any, topic: str, brokers: str, error: type[Exception],
                     role: str) -> list[int]:
    """The partition ids of ``topic``, or ``error`` saying why they cannot be had."""
    meta = cluster_metadata(client, topic, brokers, error, role).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        why = error_text(meta.error) if meta is not None and meta.error else "no partitions"
        raise error(f"{role} {topic}: the topic on {brokers} cannot be used: {why}")
    return sorted(meta.partitions)


def read_all(brokers: str | Iterable[str], topic: str, timeout: float = 30.0) -> Iterator[Any]:
    """Every record of ``topic`` now, partition by partition in offset order (for tools,
    the demo and tests, not the source).  A partition that stops delivering before its
    end offset is a :class:`~sqe.errors.SourceError` naming it."""


    consumer = new_consumer(consumer_conf(brokers, f"sqe-read-{uuid.uuid4().hex}", quiet=True),
                            "reader of a whole topic")
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics[topic]
        for p in sorted(meta.partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            consumer.assign([TopicPartition(topic, p, lo)])
            position = lo
            while position < hi:
                got = consumer.consume(num_messages=min(10_000, hi - position), timeout=timeout)
                if not got:
                    raise SourceError(f"{topic}/{p}: no records after offset {position} within "
                                      f"{timeout:.0f} s, though the broker reports {hi} as its end")
                for m in got:
                    if m.error() is not None:
                        raise SourceError(f"{topic}/{p}: {error_text(m.error())}")
                    position = cast(int, m.offset()) + 1
                    yield m
    finally:
        consumer.close()
