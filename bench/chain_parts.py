"""The single-part contenders of bench/chain.py, each run by it as a whole process.

    PYTHONPATH=. python bench/chain_parts.py spark-read --brokers HOST:PORT --topic T
        --checkpoint DIR [--batch-records N]
    PYTHONPATH=. python bench/chain_parts.py raw-read --brokers HOST:PORT --topic T
    PYTHONPATH=. python bench/chain_parts.py state-write --brokers HOST:PORT --records N
        [--partitions 4]
    PYTHONPATH=. python bench/chain_parts.py idempotent-write --brokers HOST:PORT --records N
        [--partitions 4]

* ``spark-read``: a Spark streaming query over the project's ``sqe-kafka`` source (AvailableNow
  trigger, ``maxRecordsPerBatch`` = ``--batch-records``), whose ``foreachBatch`` counts the rows;
  it also reports the rows and the seconds of the counts after the first batch (``later_*``):
  the read once the workers run and the JVM's code is made, as in a long-running stream.
* ``raw-read``: one confluent-kafka consumer that assigns every partition from its first offset
  and reads the same range, touching each record's key, value and offset.
* ``state-write``: the Kafka state (``state.kafka.sink.write_kafka``, keytype StreamMetadata,
  ``SourcePartitionPartitioner``) run by Spark on a cached DataFrame of the records, as
  ``bench/kafka_write.py`` measures it (its :class:`Writers`, writer ``state``); then the same
  again to another topic (``again_seconds``), its workers and producers made.
* ``idempotent-write``: the same records from one bare confluent-kafka producer with
  ``enable.idempotence=true``, partitioned the same way (``bench/kafka_write.py``'s writer
  ``idempotent``, in a process of its own).

The writers' records are ``kafka_write.make_records(N)`` (100-byte values, 20-byte
StreamMetadata keys of 2 pids x 8 source partitions), made in each process.  Each prints one
JSON object as its last stdout line: what it read or wrote (the topic, the count) and the
seconds of its work alone (the rest of the process's time is start-up); a failure is one
``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from bench import kafka_write
from bench.harness import BenchError
from bench.harness.report import parser
from bench.harness.topics import create_topic, topic_size
from bench.part_script import run_part
from sqe.errors import SqeError


def spark_read(brokers: str, topic: str, checkpoint: str, batch_records: int) -> dict[str, Any]:
    from sqe.engine.spark.session import build_session
    from sqe.source.kafka import KafkaSource

    spark = build_session("bench-chain-read", {"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.dataSource.register(KafkaSource)
        counts: list[tuple[int, float]] = []  # per batch: its rows, the seconds of its read

        def count(df: Any, _id: int) -> None:
            began = time.perf_counter()
            rows = df.count()
            counts.append((rows, time.perf_counter() - began))

        frame = (spark.readStream.format(KafkaSource.name())
                 .options(topic=topic, brokers=brokers, maxRecordsPerBatch=str(batch_records))
                 .load())
        start = time.perf_counter()
        query = (frame.writeStream.trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint).foreachBatch(count).start())
        query.awaitTermination()
        seconds = time.perf_counter() - start
    finally:
        spark.stop()
    later = counts[1:]
    return {"topic": topic, "rows": sum(n for n, _ in counts), "batches": len(counts),
            "seconds": seconds, "later_rows": sum(n for n, _ in later),
            "later_seconds": sum(t for _, t in later)}


def raw_read(brokers: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "bench-raw-read",
                         "enable.auto.commit": False, "receive.message.max.bytes": 200_000_000})
    try:
        start = time.perf_counter()
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        parts, left = [], 0
        for p in meta.partitions:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            parts.append(TopicPartition(topic, p, lo))
            left += hi - lo
        consumer.assign(parts)
        rows = value_bytes = last_offset = 0
        idle_since = time.monotonic()
        while left > 0:
            msgs = consumer.consume(num_messages=min(10_000, left), timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise BenchError(f"reading {topic}: {m.error().str()}")
                m.key()
                value_bytes += len(m.value() or b"")
                last_offset = m.offset()
            rows += len(msgs)
            left -= len(msgs)
            if msgs:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 60:
                raise BenchError(f"reading {topic}: {left} records not delivered "
                                             "in 60 s")
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    return {"topic": topic, "rows": rows, "value_bytes": value_bytes, "last_offset": last_offset,
            "seconds": seconds}


def state_write(brokers: str, records: int, partitions: int) -> dict[str, Any]:
    from sqe.engine.spark.session import build_session

    spark = build_session("bench-chain-write", {"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        writers = kafka_write.Writers(spark, kafka_write.make_records(records), brokers,
                                      partitions, 10_000)
        seconds = writers.run("state")
        first = writers.topics["state"]
        # again, to a new topic: the workers, their producers and the JVM's code made
        again = writers.run("state")
        writers.frame.unpersist()
    finally:
        spark.stop()
    return {"topic": first, "written": writers.offsets["state"], "seconds": seconds,
            "again_seconds": again}


def idempotent_write(brokers: str, records: int, partitions: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    from partitioners import SourcePartitionPartitioner

    data = kafka_write.make_records(records)
    keys = data.keys()
    targets = SourcePartitionPartitioner().partition_array(keys, partitions).tolist()
    topic = create_topic(brokers, "bench-write-idempotent", partitions)
    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "receive.message.max.bytes": 200_000_000,
                         "log_level": 2})
    start = time.perf_counter()
    kafka_write.produce_all(producer, topic, keys.to_pylist(), data.value, targets, None)
    seconds = time.perf_counter() - start
    return {"topic": topic, "written": topic_size(brokers, topic), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("part", choices=("spark-read", "raw-read", "state-write", "idempotent-write"))
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", help="the topic to read (the readers)")
    ap.add_argument("--records", type=int, default=0, help="records to write (the writers)")
    ap.add_argument("--checkpoint", help="the Spark reader's checkpoint directory")
    ap.add_argument("--batch-records", type=int, default=1_000_000,
                    help="maxRecordsPerBatch of the Spark reader")
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the writers' topic")
    args = ap.parse_args(argv)
    if args.part == "spark-read" and (not args.topic or not args.checkpoint):
        ap.error("spark-read needs --topic and --checkpoint")
    if args.part == "raw-read" and not args.topic:
        ap.error("raw-read needs --topic")
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "spark-read": lambda: spark_read(args.brokers, args.topic, args.checkpoint,
                                         args.batch_records),
        "raw-read": lambda: raw_read(args.brokers, args.topic),
        "state-write": lambda: state_write(args.brokers, args.records, args.partitions),
        "idempotent-write": lambda: idempotent_write(args.brokers, args.records, args.partitions)}
    return run_part(parts[args.part], (BenchError, SqeError))


if __name__ == "__main__":
    sys.exit(main())
