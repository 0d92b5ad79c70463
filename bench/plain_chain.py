"""The chain of topologies/enrich.yaml and topologies/load.yaml as a plain Python program.

    PYTHONPATH=. python bench/plain_chain.py enrich --brokers HOST:PORT --source events
        --sink enriched [--pid N]
    PYTHONPATH=. python bench/plain_chain.py load --brokers HOST:PORT --source enriched
        --redis redis://HOST:PORT/DB [--consumer NAME]

What ``bench/chain.py`` runs against ``sqe run``: the same two steps, each a whole process,
written by hand with confluent-kafka, redis-py, json and struct only (no SQE code):

* ``enrich`` reads everything the ``--source`` topic holds when it starts, decodes each JSON
  value, keeps the events whose ``event_id`` is not null, selects ``event_id, user,
  upper(region), amount, amount * 100 AS amount_cents, amount > 50 AS big_spender`` (the select
  and where of enrich.yaml; null fields are left out of the JSON, as Spark's ``to_json`` does)
  and produces each to ``--sink`` with an idempotent producer, keyed with the 20-byte
  StreamMetadata of its source record (``struct.pack('>qiq', pid, source partition, source
  offset)``), into partition ``source partition % sink partitions``.
* ``load`` reads everything ``--source`` holds, decodes each key, drops the records at or below
  the high-water mark of their (pid, partition) (kept in the Redis hash
  ``plain:{<consumer>}:hwm``), and writes what load.yaml writes: ``HSET <region> <event_id>
  <amount_cents>`` (events_by_region) and ``HSET load_log <partition>:<offset> <event_id>``,
  in MULTI/EXEC pipelines of ``--chunk`` records that also store the new marks, so the rows and
  the marks of a chunk are committed together.

The steps are :class:`Enricher` and :class:`Loader`, fed batches of records: here by
:func:`read_all` (what the topic holds), in ``bench/plain_latency.py`` by a consumer that
follows the topic until SIGTERM.  Each prints one JSON object as its last stdout line (records
read, written or dropped, and the seconds of its work); a failure is one ``error: ...`` line on
stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench.part_script import enriched, keeps, load_fields, run_part

CLIENT = {"receive.message.max.bytes": 200_000_000}  # the pip broker ignores fetch limits
KEY = struct.Struct(">qiq")  # StreamMetadata: pid, source partition, source offset
CONSUME_MAX = 10_000
DEFAULT_PID = 7_305_179_412_250_281_217


class PlainError(Exception):
    """A failure reported as one sentence."""


def partitions(client: Consumer | Producer, topic: str) -> list[int]:
    """The partitions of ``topic``; a PlainError when it is missing or has none."""
    meta = client.list_topics(topic, timeout=30).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise PlainError(f"topic {topic} is missing or has no partitions")
    return sorted(meta.partitions)


def _assign_all(consumer: Consumer, topic: str) -> int:
    """Assign every partition of ``topic`` from its first offset; the records it holds now."""
    parts, total = [], 0
    for p in partitions(consumer, topic):
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        parts.append(TopicPartition(topic, p, lo))
        total += hi - lo
    consumer.assign(parts)
    return total


def read_all(brokers: str, topic: str, group: str) -> Iterator[list[Any]]:
    """Every record ``topic`` holds now, in batches of messages (a generator)."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **CLIENT})
    try:
        left = _assign_all(consumer, topic)
        idle_since = time.monotonic()
        while left > 0:
            # consume() waits its whole timeout when fewer than num_messages remain: ask for
            # no more than what is left.
            msgs = consumer.consume(num_messages=min(CONSUME_MAX, left), timeout=1.0)
            good = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise PlainError(f"reading {topic}: {err.str()}")
                good.append(m)
            if good:
                left -= len(good)
                idle_since = time.monotonic()
                yield good
            elif time.monotonic() - idle_since > 60:
                raise PlainError(f"reading {topic}: {left} records reported but not delivered "
                                 "in 60 s")
    finally:
        consumer.close()


class Enricher:
    """Step 1 (enrich.yaml) on batches of source records: see the module docstring."""

    def __init__(self, brokers: str, sink: str, pid: int, linger_ms: int) -> None:
        self.sink, self.pid = sink, pid
        self.failures: list[str] = []
        self.producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": linger_ms, **CLIENT})
        self.sink_partitions = len(partitions(self.producer, sink))
        self.read = self.written = 0

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None and len(self.failures) < 3:
            self.failures.append(err.str())

    def send(self, batch: list[Any]) -> None:
        """Produce the outputs of ``batch`` (:meth:`flush` waits for them)."""
        producer, sink, pid, n = self.producer, self.sink, self.pid, self.sink_partitions
        dumps, pack, produce, delivered = json.dumps, KEY.pack, producer.produce, self._delivered
        written = 0
        for m in batch:
            try:
                event = json.loads(m.value())
            except (ValueError, TypeError):
                continue  # not JSON: no fields, and a null event_id is filtered out
            if not keeps(event):
                continue
            value = dumps(enriched(event), separators=(",", ":")).encode()
            partition = m.partition()
            key = pack(pid, partition, m.offset())
            while True:
                try:
                    produce(sink, value, key, partition % n, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            written += 1
        self.read += len(batch)
        self.written += written
        producer.poll(0)

    def flush(self) -> None:
        """Wait until every output sent is acknowledged; a PlainError when one is not."""
        left = self.producer.flush(120)
        if self.failures or left:
            why = self.failures[0] if self.failures else f"{left} records not acknowledged"
            raise PlainError(f"writing {self.sink}: {why}")


class Loader:
    """Step 2 (load.yaml) on batches of enriched records: see the module docstring.  The rows
    and new marks of every ``chunk`` records, and of the end of each batch, are one MULTI/EXEC."""

    def __init__(self, client: redis.Redis, name: str, chunk: int) -> None:
        self.client, self.chunk = client, chunk
        self.hwm_key = f"plain:{{{name}}}:hwm"
        self.marks = {k.decode(): int(v) for k, v in client.hgetall(self.hwm_key).items()}
        self.rows: list[tuple[str, str, str, str]] = []  # region, event_id, cents, position
        self.touched: dict[str, int] = {}
        self.read = self.dropped = self.written = 0

    def take(self, batch: list[Any]) -> None:
        """Write the rows of ``batch``, dropping the replays."""
        rows, touched, marks, chunk = self.rows, self.touched, self.marks, self.chunk
        unpack, fields = KEY.unpack, load_fields
        dropped = 0
        for m in batch:
            key = m.key()
            if key is not None and len(key) == KEY.size:
                pid, spart, soff = unpack(key)
                pair = f"{pid}:{spart}"
                if soff <= marks.get(pair, -1):
                    dropped += 1
                    continue
                marks[pair] = touched[pair] = soff
            try:
                row = json.loads(m.value())
            except (ValueError, TypeError):
                row = None
            rows.append((*fields(row), f"{m.partition()}:{m.offset()}"))
            if len(rows) >= chunk:
                self._commit()
        if rows:
            self._commit()
        self.read += len(batch)
        self.dropped += dropped
        self.written += len(batch) - dropped

    def _commit(self) -> None:
        pipe = self.client.pipeline(transaction=True)
        for region, event_id, cents, position in self.rows:
            pipe.hset(region, event_id, cents)
            pipe.hset("load_log", position, event_id)
        if self.touched:
            pipe.hset(self.hwm_key, mapping=self.touched)
        pipe.execute()
        self.rows.clear()
        self.touched.clear()


@contextmanager
def loader(redis_url: str, name: str, chunk: int) -> Iterator[Loader]:
    """A :class:`Loader` on ``redis_url`` (marks in ``plain:{<name>}:hwm``); its Redis errors
    as a PlainError."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield Loader(client, name, chunk)
    except redis.RedisError as exc:
        raise PlainError(f"Redis at {redis_url}: {exc}") from None
    finally:
        client.close()


def enrich(brokers: str, source: str, sink: str, pid: int) -> dict[str, Any]:
    """Step 1 (enrich.yaml) on what ``source`` holds: see the module docstring."""
    step = Enricher(brokers, sink, pid, linger_ms=20)
    start = time.perf_counter()
    for batch in read_all(brokers, source, "plain-enrich"):
        step.send(batch)
    step.flush()
    return {"records_read": step.read, "records_written": step.written,
            "seconds": time.perf_counter() - start}


def load(brokers: str, source: str, redis_url: str, consumer_name: str, chunk: int
         ) -> dict[str, Any]:
    """Step 2 (load.yaml) on what ``source`` holds: see the module docstring."""
    start = time.perf_counter()
    with loader(redis_url, consumer_name, chunk) as step:
        for batch in read_all(brokers, source, "plain-load"):
            step.take(batch)
    return {"records_read": step.read, "replays_dropped": step.dropped,
            "records_written": step.written, "seconds": time.perf_counter() - start}


def step_parsers(description: str, enrich_help: str, load_help: str
                 ) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser,
                            argparse.ArgumentParser]:
    """The parser of a plain chain's CLI and its ``enrich`` and ``load`` subparsers, with the
    options both modes take."""
    ap = argparse.ArgumentParser(description=description)
    sub = ap.add_subparsers(dest="step", required=True)
    e = sub.add_parser("enrich", help=enrich_help)
    e.add_argument("--brokers", required=True)
    e.add_argument("--source", required=True, help="the events topic")
    e.add_argument("--sink", required=True, help="the enriched topic (created beforehand)")
    ld = sub.add_parser("load", help=load_help)
    ld.add_argument("--brokers", required=True)
    ld.add_argument("--source", required=True, help="the enriched topic")
    ld.add_argument("--redis", required=True, help="redis://HOST:PORT/DB")
    return ap, e, ld


def main(argv: list[str] | None = None) -> int:
    ap, e, ld = step_parsers((__doc__ or "").split("\n\n")[0],
                             "events -> enriched (enrich.yaml)", "enriched -> Redis (load.yaml)")
    e.add_argument("--pid", type=int, default=DEFAULT_PID, help="the pid stamped in every key")
    ld.add_argument("--consumer", default="plain.Enriched", help="names the marks' hash")
    ld.add_argument("--chunk", type=int, default=5_000, help="records per MULTI/EXEC pipeline")
    args = ap.parse_args(argv)

    def work() -> dict[str, Any]:
        if args.step == "enrich":
            return enrich(args.brokers, args.source, args.sink, args.pid)
        return load(args.brokers, args.source, args.redis, args.consumer, args.chunk)

    return run_part(work, (PlainError, KafkaException))


if __name__ == "__main__":
    sys.exit(main())
