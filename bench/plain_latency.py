"""The chain of topologies/enrich.yaml and load.yaml as long-running plain programs.

    PYTHONPATH=. python bench/plain_latency.py enrich --brokers HOST:PORT --source events
        --sink enriched [--group NAME] [--pid N]
    PYTHONPATH=. python bench/plain_latency.py load --brokers HOST:PORT --source enriched
        --redis redis://HOST:PORT/DB [--group NAME]

What ``bench/latency.py`` runs against long-running ``sqe run`` processes: the two steps of
``bench/plain_chain.py`` (its :class:`Enricher` and :class:`Loader`: the same transform, keys,
partitions and Redis writes; confluent-kafka, redis-py, json and struct only, no SQE code), each
a process that consumes until SIGTERM or SIGINT instead of reading what its topic held when it
started.  What this file adds is the source of their batches and when offsets are committed:

* every partition of ``--source`` is assigned (no group rebalance), from the group's committed
  offset, else the earliest;
* the loop blocks in ``poll(0.5)`` for the first record and takes what the client already
  fetched with ``consume(timeout=0)``: a record is handled as soon as it arrives, with no
  fixed wait;
* ``enrich`` produces each output with an idempotent producer (``linger.ms`` 5) and, every
  ``--commit-every`` seconds, flushes and then commits the source offsets it consumed (at least
  once: a restart re-sends what was not committed, with the same StreamMetadata keys);
* ``load`` writes each polled batch's ``HSET <region> <event_id> <amount_cents>`` and
  ``HSET load_log <partition>:<offset> <event_id>`` with the batch's new high-water marks in
  one MULTI/EXEC, dropping records at or below the mark of their (pid, partition) (replays),
  then commits its offsets asynchronously: exactly once in Redis.

On SIGTERM each step finishes its batch, flushes, commits, prints one JSON object (records
read and written) and exits 0; a failure is one ``error: ...`` line on stderr and exit 1.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from bench.part_script import run_part
from bench.plain_chain import CLIENT, DEFAULT_PID, Enricher, PlainError, loader, partitions, step_parsers

BATCH = 10_000


def records(brokers: str, topic: str, group: str, stopping: Callable[[], bool],
            done: Callable[[Consumer, list[Any]], None]) -> Iterator[list[Any]]:
    """Batches of the records of every partition of ``topic`` as they arrive, until
    ``stopping()``; ``done(consumer, batch)`` is called once each batch is handled, and with
    an empty batch at the end."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100, **CLIENT})
    try:
        parts = [TopicPartition(topic, p) for p in partitions(consumer, topic)]
        starts = consumer.committed(parts, timeout=30)
        consumer.assign([TopicPartition(topic, t.partition, t.offset if t.offset >= 0
                                        else OFFSET_BEGINNING) for t in starts])
        while not stopping():
            first = consumer.poll(0.5)
            if first is None:
                continue
            batch = [first, *consumer.consume(BATCH, timeout=0)]
            bad = [err for m in batch if (err := m.error()) is not None]
            if bad:
                raise PlainError(f"reading {topic}: {bad[0].str()}")
            yield batch
            done(consumer, batch)
        done(consumer, [])
    finally:
        consumer.close()


def next_offsets(batch: list[Any]) -> list[TopicPartition]:
    """The offsets to commit once ``batch`` is handled: past its last record per partition."""
    last: dict[tuple[str, int], int] = {}
    for m in batch:
        last[m.topic(), m.partition()] = m.offset() + 1
    return [TopicPartition(t, p, o) for (t, p), o in last.items()]


def enrich(brokers: str, source: str, sink: str, group: str, pid: int, commit_every: float,
           stopping: Callable[[], bool]) -> dict[str, Any]:
    """Step 1 (enrich.yaml), long-running: see the module docstring."""
    step = Enricher(brokers, sink, pid, linger_ms=5)
    pending: dict[tuple[str, int], int] = {}
    committed_at = [time.monotonic()]

    def done(consumer: Consumer, batch: list[Any]) -> None:
        for tp in next_offsets(batch):
            pending[tp.topic, tp.partition] = tp.offset
        if not pending or (not stopping() and time.monotonic() - committed_at[0] < commit_every):
            return
        step.flush()
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()],
                        asynchronous=False)
        pending.clear()
        committed_at[0] = time.monotonic()

    for batch in records(brokers, source, group, stopping, done):
        step.send(batch)
    return {"records_read": step.read, "records_written": step.written}


def load(brokers: str, source: str, redis_url: str, group: str,
         stopping: Callable[[], bool]) -> dict[str, Any]:
    """Step 2 (load.yaml), long-running: see the module docstring."""
    last: list[Any] = []

    def done(consumer: Consumer, batch: list[Any]) -> None:
        if batch:
            last[:] = batch
        if last:
            consumer.commit(offsets=next_offsets(last), asynchronous=True)

    with loader(redis_url, group, sys.maxsize) as step:  # one MULTI/EXEC per polled batch
        for batch in records(brokers, source, group, stopping, done):
            step.take(batch)
    return {"records_read": step.read, "records_dropped": step.dropped,
            "records_written": step.written}


def main(argv: list[str] | None = None) -> int:
    ap, e, ld = step_parsers((__doc__ or "").split("\n\n")[0],
                             "events -> enriched (enrich.yaml), until stopped",
                             "enriched -> Redis (load.yaml), until stopped")
    e.add_argument("--group", default="plain-latency-enrich")
    e.add_argument("--pid", type=int, default=DEFAULT_PID, help="the pid stamped in every key")
    e.add_argument("--commit-every", type=float, default=1.0,
                   help="seconds between flush + offset commit")
    ld.add_argument("--group", default="plain-latency-load", help="also names the marks' hash")
    args = ap.parse_args(argv)
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))

    def stopping() -> bool:
        return bool(stop)

    def work() -> dict[str, Any]:
        if args.step == "enrich":
            return enrich(args.brokers, args.source, args.sink, args.group, args.pid,
                          args.commit_every, stopping)
        return load(args.brokers, args.source, args.redis, args.group, stopping)

    return run_part(work, (PlainError, KafkaException))


if __name__ == "__main__":
    sys.exit(main())
