"""The chain of topologies/enrich.yaml and topologies/load.yaml as a plain Python program.

    python bench/plain_chain.py enrich --brokers HOST:PORT --source events --sink enriched [--pid N]
    python bench/plain_chain.py load --brokers HOST:PORT --source enriched --redis redis://HOST:PORT/DB
                                     [--consumer NAME]

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

Each prints one JSON object as its last stdout line (records read, written or dropped, and the
seconds of its work); a failure is one ``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

CLIENT = {"receive.message.max.bytes": 200_000_000}  # the pip broker ignores fetch limits
KEY = struct.Struct(">qiq")  # StreamMetadata: pid, source partition, source offset
CONSUME_MAX = 10_000


class PlainError(Exception):
    """A failure reported as one sentence."""


def _assign_all(consumer: Consumer, topic: str) -> int:
    """Assign every partition of ``topic`` from its first offset; the records it holds now."""
    meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise PlainError(f"topic {topic} is missing or has no partitions")
    parts, total = [], 0
    for p in meta.partitions:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        parts.append(TopicPartition(topic, p, lo))
        total += hi - lo
    consumer.assign(parts)
    return total


def read_all(brokers: str, topic: str, group: str) -> Any:
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


def enrich(brokers: str, source: str, sink: str, pid: int) -> dict[str, Any]:
    """Step 1 (enrich.yaml): see the module docstring."""
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None and len(failures) < 3:
            failures.append(err.str())

    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, **CLIENT})
    meta = producer.list_topics(sink, timeout=30).topics.get(sink)
    if meta is None or meta.error is not None or not meta.partitions:
        raise PlainError(f"topic {sink} is missing or has no partitions")
    sink_partitions = len(meta.partitions)
    start = time.perf_counter()
    read = written = 0
    dumps, pack, produce = json.dumps, KEY.pack, producer.produce
    for batch in read_all(brokers, source, "plain-enrich"):
        read += len(batch)
        for m in batch:
            try:
                event = json.loads(m.value())
            except (ValueError, TypeError):
                continue  # not JSON: no fields, and a null event_id is filtered out
            if not isinstance(event, dict) or event.get("event_id") is None:
                continue
            region, amount = event.get("region"), event.get("amount")
            out = {"event_id": event["event_id"], "user": event.get("user"),
                   "region": region.upper() if isinstance(region, str) else region,
                   "amount": amount,
                   "amount_cents": None if amount is None else amount * 100,
                   "big_spender": None if amount is None else amount > 50}
            value = dumps({k: v for k, v in out.items() if v is not None}, separators=(",", ":"))
            partition = m.partition()
            key = pack(pid, partition, m.offset())
            while True:
                try:
                    produce(sink, value.encode(), key, partition % sink_partitions,
                            on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            written += 1
        producer.poll(0)
    left = producer.flush(120)
    if failures or left:
        raise PlainError(f"writing {sink}: {failures[0] if failures else f'{left} records not acknowledged'}")
    return {"records_read": read, "records_written": written,
            "seconds": time.perf_counter() - start}


def load(brokers: str, source: str, redis_url: str, consumer_name: str, chunk: int
         ) -> dict[str, Any]:
    """Step 2 (load.yaml): see the module docstring."""
    client = redis.Redis.from_url(redis_url)
    hwm_key = f"plain:{{{consumer_name}}}:hwm"
    start = time.perf_counter()
    try:
        marks = {k.decode(): int(v) for k, v in client.hgetall(hwm_key).items()}
        read = dropped = written = 0
        rows: list[tuple[str, str, str, str, str]] = []  # region, event_id, cents, position, id
        touched: dict[str, int] = {}
        unpack = KEY.unpack

        def commit() -> None:
            pipe = client.pipeline(transaction=True)
            for region, event_id, cents, position, event in rows:
                pipe.hset(region, event_id, cents)
                pipe.hset("load_log", position, event)
            if touched:
                pipe.hset(hwm_key, mapping=touched)
            pipe.execute()
            rows.clear()
            touched.clear()

        for batch in read_all(brokers, source, "plain-load"):
            for m in batch:
                read += 1
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
                    row = {}
                if not isinstance(row, dict):
                    row = {}
                region, event_id = row.get("region"), row.get("event_id")
                cents = row.get("amount_cents")
                rows.append(("" if region is None else str(region),
                             "" if event_id is None else str(event_id),
                             "" if cents is None else str(cents),
                             f"{m.partition()}:{m.offset()}",
                             "" if event_id is None else str(event_id)))
                written += 1
                if len(rows) >= chunk:
                    commit()
            if rows:
                commit()
        return {"records_read": read, "replays_dropped": dropped, "records_written": written,
                "seconds": time.perf_counter() - start}
    except redis.RedisError as exc:
        raise PlainError(f"Redis at {redis_url}: {exc}") from None
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    e = sub.add_parser("enrich", help="events -> enriched (enrich.yaml)")
    e.add_argument("--brokers", required=True)
    e.add_argument("--source", required=True, help="the events topic")
    e.add_argument("--sink", required=True, help="the enriched topic (created beforehand)")
    e.add_argument("--pid", type=int, default=7_305_179_412_250_281_217,
                   help="the pid stamped in every key")
    ld = sub.add_parser("load", help="enriched -> Redis (load.yaml)")
    ld.add_argument("--brokers", required=True)
    ld.add_argument("--source", required=True, help="the enriched topic")
    ld.add_argument("--redis", required=True, help="redis://HOST:PORT/DB")
    ld.add_argument("--consumer", default="plain.Enriched", help="names the marks' hash")
    ld.add_argument("--chunk", type=int, default=5_000, help="records per MULTI/EXEC pipeline")
    args = ap.parse_args(argv)
    try:
        if args.step == "enrich":
            result = enrich(args.brokers, args.source, args.sink, args.pid)
        else:
            result = load(args.brokers, args.source, args.redis, args.consumer, args.chunk)
    except (PlainError, KafkaException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
