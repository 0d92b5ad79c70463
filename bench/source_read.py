"""Throughput of the sqe-kafka read path: one task's read_range, with and without the replay filter.

    python bench/source_read.py --brokers 127.0.0.1:9092 [--records 200000]
                                [--redis redis://127.0.0.1:6379/0]

Produces ``--records`` StreamMetadata-keyed records to a fresh one-partition
topic (about 10 % replays), then reads the whole range three times each way
and prints the median records per second.  The filtered way reads its marks
from the HWM store at ``--redis`` (a consumer of its own, with no marks: none
are written).  Ratios from one run on one machine are what it is for; absolute
numbers depend on the broker.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.clients.kafka import producer_conf
from sqe.source.kafka import read_range
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.wire.keys import StreamMetadata


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                    help="the HWM store the filtered reads ask for marks")
    args = ap.parse_args()
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.brokers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result(30)
    producer = Producer(producer_conf(args.brokers))
    offset = 0
    for i in range(args.records):
        offset = offset - 5 if i % 50 == 49 else offset + 1  # a retry every 50 records
        while True:
            try:
                producer.produce(topic, b"x" * 100, StreamMetadata(1, 0, offset).to_bytes(), 0)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)
    # A warm-up read first, so both measured ways find the log in the page cache.
    warm = SourceConfig.from_options({"topic": topic, "brokers": args.brokers})
    sum(b.num_rows for b in read_range(warm, RangePartition(topic, 0, 0, args.records)))
    for label, filtered in (("no filter", False), ("filterReplays", True)):
        cfg = SourceConfig.from_options({"topic": topic, "brokers": args.brokers,
                                         "filterReplays": str(filtered).lower(),
                                         "filterReplays.redis.url": args.redis,
                                         "hwmConsumer": f"bench-{topic}"})
        p = RangePartition(topic, 0, 0, args.records)
        rates, rows = [], 0
        for _ in range(3):
            t = time.perf_counter()
            rows = sum(b.num_rows for b in read_range(cfg, p))
            rates.append(args.records / (time.perf_counter() - t))
        print(f"{label:14s} {statistics.median(rates):>12,.0f} records/s  ({rows} rows kept)")


if __name__ == "__main__":
    main()
