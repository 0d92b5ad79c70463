"""Throughput of the sqe-kafka read path: one task's read_range, with and without the replay filter.

    PYTHONPATH=. .venv/bin/python bench/source_read.py --brokers 127.0.0.1:9092
        [--records 200000] [--redis redis://127.0.0.1:6379/0]

Produces ``--records`` StreamMetadata-keyed records to a fresh one-partition
topic (about 10 % replays), then reads the whole range three times each way
and prints the median records per second.  The filtered way reads its marks
from the HWM store at ``--redis`` (a consumer of its own, with no marks: none
are written).  Ratios from one run on one machine are what it is for; absolute
numbers depend on the broker.
"""

from __future__ import annotations

import statistics
import time

from bench.harness.report import parser
from bench.harness.topics import create_topic, fill
from sqe.source.kafka import read_range
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.wire.keys import StreamMetadata


def offsets(records: int) -> list[int]:
    """The source offsets of the records: counting up, with a retry every 50 records."""
    out, offset = [], 0
    for i in range(records):
        offset = offset - 5 if i % 50 == 49 else offset + 1
        out.append(offset)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                    help="the HWM store the filtered reads ask for marks")
    args = ap.parse_args()
    topic = create_topic(args.brokers, "bench", 1)
    fill(args.brokers, topic, ((StreamMetadata(1, 0, offset).to_bytes(), b"x" * 100, 0)
                               for offset in offsets(args.records)))
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
