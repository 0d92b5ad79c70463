"""Write throughput of the Kafka state against the producers users would write by hand.

    PYTHONPATH=. .venv/bin/python bench/kafka_write.py [--records 500000] [--partitions 4]
        [--txn-records 10000] [--repeat 3] [--brokers HOST:PORT] [--json]

The data: ``--records`` records of 100 bytes with 20-byte StreamMetadata keys
of 2 pids x 8 source partitions, in source-offset order per (pid, partition).
Three writers, the same records, the same broker, each into a fresh topic of
``--partitions`` partitions per repetition (interleaved, ``--repeat`` times,
medians):

* (a) ``state``: :func:`state.kafka.sink.write_kafka` with keytype StreamMetadata
  and ``partitioners.SourcePartitionPartitioner``, run by Spark on a cached
  DataFrame of the records (4 Spark partitions, each holding whole source
  partitions in offset order, as the runner hands them over; tasks run on
  all cores, each with its own idempotent producer, flushed before the task
  ends): the exactly-once writer of ``sqe run``, whose retries the next hop
  drops as replays;
* (b) ``idempotent``: one confluent-kafka producer in this process with
  ``enable.idempotence=true`` (the project's :func:`producer_conf`), the
  partition computed the same way, flushed at the end;
* (c) ``transactional``: the same producer with a ``transactional.id``,
  ``begin_transaction`` / ``commit_transaction`` around every
  ``--txn-records`` records: what users pick for exactly-once with Kafka
  transactions.  When the broker refuses transactions the row is reported
  as unavailable with the broker's error.

Reported: records/s of each (the Spark job's wall time for (a), produce to
last acknowledgement for (b) and (c)) and the ratios.  A local pip broker is
started unless ``--brokers`` is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import BenchError
from bench.harness.report import finish, parser, say, service_options
from bench.harness.services import kafka_broker, with_services
from bench.harness.topics import committed_records, create_topic, topic_size
from sqe.wire.columns import CARRIED
from sqe.wire.keys import encode_keys

PIDS = (4_411_772_100_000_000_001, -7_000_000_000_000_000_003)
SOURCE_PARTITIONS = 8
VALUE_SIZE = 100
WRITERS = ("state", "idempotent", "transactional")
LABELS = {"state": "(a) Kafka state (write_kafka, Spark)",
          "idempotent": "(b) idempotent producer",
          "transactional": "(c) transactional producer"}


@dataclass
class Records:
    """The records every writer writes, in the order they are written."""

    pid: np.ndarray
    spart: np.ndarray
    soff: np.ndarray
    value: bytes

    def __len__(self) -> int:
        return len(self.soff)

    def keys(self) -> pa.BinaryArray:
        return encode_keys(self.pid, self.spart, self.soff)

    def table(self) -> pa.Table:
        """The records as the columns a Kafka state query hands to ``write_kafka``."""
        n = len(self)
        values = pa.array([self.value] * n, pa.binary())
        return pa.table({"value": values, CARRIED[0]: pa.array(self.pid),
                         CARRIED[1]: pa.array(self.spart), CARRIED[2]: pa.array(self.soff)})


def make_records(records: int, seed: int = 3) -> Records:
    """``records`` records over 16 (pid, partition) groups, interleaved at random; each
    group's offsets count up from 0 in the order its records come."""
    rng = np.random.default_rng(seed)
    groups = [(pid, sp) for pid in PIDS for sp in range(SOURCE_PARTITIONS)]
    group = rng.integers(0, len(groups), records)
    by_group = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(groups))
    first = np.repeat(np.cumsum(counts) - counts, counts)
    soff = np.empty(records, np.int64)
    soff[by_group] = np.arange(records) - first
    pid = np.array([p for p, _ in groups], np.int64)[group]
    spart = np.array([s for _, s in groups], np.int32)[group]
    return Records(pid, spart, soff, bytes(range(VALUE_SIZE)))


def produce_all(producer: Any, topic: str, keys: list[bytes], value: bytes,
                targets: list[int], txn_records: int | None) -> None:
    """Produce every record (in transactions of ``txn_records`` when given) and wait for all
    acknowledgements; the first delivery error fails the run."""
    from confluent_kafka import KafkaException

    from sqe.clients.kafka import error_text

    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None and len(failures) < 3:
            failures.append(error_text(err))

    step = txn_records or len(keys)
    try:
        for start in range(0, len(keys), step):
            if txn_records:
                producer.begin_transaction()
            for key, target in zip(keys[start:start + step], targets[start:start + step],
                                   strict=True):
                while True:
                    try:
                        producer.produce(topic, value, key, target, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
            if txn_records:
                producer.commit_transaction(120)
        left = producer.flush(120)
    except KafkaException as exc:
        raise BenchError(error_text(exc)) from None
    if failures or left:
        raise BenchError(failures[0] if failures else f"{left} records not acknowledged")


class Writers:
    """Runs the three writers on the same records and broker."""

    def __init__(self, spark: Any, records: Records, brokers: str, partitions: int,
                 txn_records: int) -> None:
        from confluent_kafka.admin import AdminClient

        from partitioners import SourcePartitionPartitioner

        self.spark, self.records, self.brokers = spark, records, brokers
        self.partitions, self.txn_records = partitions, txn_records
        self.admin = AdminClient({"bootstrap.servers": brokers, "log_level": 2})
        keys = records.keys()
        self.keys = keys.to_pylist()
        self.targets = SourcePartitionPartitioner().partition_array(keys, partitions).tolist()
        frame = spark.createDataFrame(records.table())
        # Each Spark partition holds whole source partitions in offset order (as the
        # runner hands a Kafka state its rows); cached, so the measurement is the write.
        self.frame = (frame.repartition(4, CARRIED[1])
                      .sortWithinPartitions(CARRIED[1], CARRIED[0], CARRIED[2]).cache())
        self.frame.count()
        self.transactions_error: str | None = None
        self.offsets: dict[str, int] = {}  # offsets each writer's last topic holds
        self.topics: dict[str, str] = {}  # each writer's last topic

    def run(self, writer: str) -> float | None:
        """Seconds ``writer`` took to write every record, or ``None`` when unavailable.

        For (b) and (c) the producer is made (and its transactions initialised) before the
        clock starts, as a long-lived producer would be; (a) makes one per Spark task and
        micro-batch, so that is part of its time.
        """
        topic = create_topic(self.brokers, f"bench-write-{writer}", self.partitions, self.admin)
        if writer == "state":
            start = time.perf_counter()
            self._state(topic)
        else:
            txn = self.txn_records if writer == "transactional" else None
            if txn and self.transactions_error is not None:
                return None
            try:
                producer = self._producer(txn)
            except BenchError as exc:
                self.transactions_error = str(exc)
                return None
            start = time.perf_counter()
            produce_all(producer, topic, self.keys, self.records.value, self.targets, txn)
        seconds = time.perf_counter() - start
        written = topic_size(self.brokers, topic)
        expected = len(self.records)
        if written < expected or (writer != "transactional" and written != expected):
            raise BenchError(f"writer {writer} left {written} offsets in {topic}, expected "
                             f"{expected}")
        self.offsets[writer] = written
        self.topics[writer] = topic
        return seconds

    def _state(self, topic: str) -> None:
        from state.kafka.config import KafkaStateConfig
        from state.kafka.sink import write_kafka

        cfg = KafkaStateConfig(topic=topic, brokers=self.brokers, keytype="StreamMetadata",
                               fields=("value",),
                               partitioner="partitioners.SourcePartitionPartitioner")
        written = write_kafka(self.frame, cfg)
        if written != len(self.records):
            raise BenchError(f"write_kafka reported {written} records of {len(self.records)}")

    def _producer(self, txn_records: int | None) -> Any:
        from confluent_kafka import KafkaException, Producer

        from sqe.clients.kafka import error_text, producer_conf

        extra: dict[str, Any] = {"log_level": 2}
        if txn_records:
            extra["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
        producer = Producer(producer_conf(self.brokers, extra))
        producer.list_topics(timeout=30)  # connected before the clock starts
        if txn_records:
            try:
                producer.init_transactions(30)
            except KafkaException as exc:
                raise BenchError(error_text(exc)) from None
        return producer


def measure(args: argparse.Namespace, brokers: str) -> dict[str, Any]:
    """Everything the benchmark measures, as the JSON object it prints."""
    from sqe.engine.spark.session import build_session

    start = time.perf_counter()
    records = make_records(args.records)
    spark = build_session("bench-kafka-write", {"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        writers = Writers(spark, records, brokers, args.partitions, args.txn_records)
        # Warm-up (not measured): Spark's first job pays for JIT and Python worker start-up;
        # and checks that a read_committed consumer sees what the transactions committed.
        warm = make_records(min(args.records, 10_000), seed=4)
        warm_writers = (Writers(spark, warm, brokers, args.partitions, args.txn_records)
                        if args.warm_up else writers)
        for writer in WRITERS if args.warm_up else ("transactional",):
            warm_writers.run(writer)
        writers.transactions_error = warm_writers.transactions_error
        if "transactional" in warm_writers.topics:
            expected = len(warm_writers.records)
            seen = committed_records(brokers, warm_writers.topics["transactional"], timeout=30)
            if seen != expected:
                raise BenchError(f"a read_committed consumer sees {seen} of the {expected} "
                                 "records the transactional producer committed")
        say(f"{len(records):,} records of {VALUE_SIZE} bytes, {args.partitions} partitions; "
            f"warm-up done at {time.perf_counter() - start:.0f} s")
        times: dict[str, list[float]] = {w: [] for w in WRITERS}
        for rep in range(args.repeat):
            for writer in WRITERS:
                seconds = writers.run(writer)
                if seconds is not None:
                    times[writer].append(seconds)
            say(f"repetition {rep + 1} of {args.repeat} at {time.perf_counter() - start:.0f} s: "
                + ", ".join(f"{w} {len(records) / times[w][-1]:,.0f}/s"
                            for w in WRITERS if times[w]))
        writers.frame.unpersist()
    finally:
        spark.stop()
    result: dict[str, Any] = {"records": len(records), "partitions": args.partitions,
                              "txn_records": args.txn_records, "repeat": args.repeat,
                              "transactions_error": writers.transactions_error,
                              "offsets_written": writers.offsets}
    for w in WRITERS:
        result[f"{w}_rps"] = (len(records) / statistics.median(times[w])) if times[w] else None
    result["state_vs_idempotent"] = result["state_rps"] / result["idempotent_rps"]
    if result["transactional_rps"] is not None:
        result["transactional_vs_idempotent"] = (result["transactional_rps"]
                                                 / result["idempotent_rps"])
        result["state_vs_transactional"] = result["state_rps"] / result["transactional_rps"]
    result["seconds"] = time.perf_counter() - start
    return result


def table(r: dict[str, Any]) -> list[str]:
    """The human-readable report."""
    lines = [f"records/s, median of {r['repeat']} ({r['records']:,} records of {VALUE_SIZE} "
             f"bytes into {r['partitions']} partitions; ratio to (b)):",
             f"  {'writer':48s} {'records/s':>12s} {'ratio':>7s}"]
    for w in WRITERS:
        label = LABELS[w] + (f", commit every {r['txn_records']:,}" if w == "transactional"
                             else "")
        if r[f"{w}_rps"] is None:
            lines.append(f"  {label:48s} {'unavailable':>12s}  the broker refused transactions: "
                         f"{r['transactions_error']}")
            continue
        ratio = "" if w == "idempotent" else f"{r[f'{w}_rps'] / r['idempotent_rps']:.2f}"
        lines.append(f"  {label:48s} {r[f'{w}_rps']:>12,.0f} {ratio:>7s}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4, help="partitions of each topic")
    ap.add_argument("--txn-records", type=int, default=10_000,
                    help="records per transaction of writer (c)")
    ap.add_argument("--repeat", type=int, default=3)
    service_options(ap, redis=False)
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="skip the unmeasured warm-up writes (for smoke tests)")
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)
    if min(args.records, args.partitions, args.txn_records, args.repeat) < 1:
        ap.error("--records, --partitions, --txn-records and --repeat must be at least 1")
    result = with_services(
        lambda stack, work: measure(args, kafka_broker(stack, work, args.brokers)))
    if result is None:
        return 1
    return finish(table(result), [], result if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
