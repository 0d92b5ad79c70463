"""The Bloom stage: a reader that wants 1 of 50 filter values, with and without it.

    PYTHONPATH=. .venv/bin/python bench/chunk_filter.py [--messages 100000] [--chunk 100]
        [--size 1000] [--json] [--brokers HOST:PORT] [--no-broker]

The data: ``--messages`` JSON messages of about ``--size`` bytes, each with one
of 50 regions, written by the Kafka state's encoder (:func:`encode_chunks`)
as chunks of ``--chunk`` messages with a 16-byte Bloom filter.  The regions
arrive the way a topic partitioned by region delivers them: 16 source
partitions, each region in one of them (so a chunk, which never mixes source
partitions, holds the 3 or 4 regions of its partition).

Three readers, the same data, one run:

* (a) no filtering: every chunk decoded, every message kept;
* (b) post-filter only: every chunk decoded, messages of ``region-7`` kept
  (``postFilter`` = ``In(_filter_value, 'region-7')``, no Bloom stage);
* (c) Bloom stage + post-filter: ``filterValues: [region-7]``.

Measured twice: the read stage alone (what ``read()`` does after the fetch:
:func:`sqe.source.kafka.rows.to_rows` on the fetched records, 5 repetitions), and
the whole ``read_range`` of a real topic through the broker (fetch included,
3 repetitions; a local pip broker is started unless ``--brokers`` is given;
``--no-broker`` skips it).  Prints medians in messages of the topic per second
and the bytes each reader decoded, and the ratios (b)/(c).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from bench.harness.report import parser, service_options
from bench.harness.services import kafka_broker, with_services
from bench.harness.topics import create_topic, fill
from sqe.source.kafka import read_range
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.kafka.rows import Records, to_rows
from sqe.wire.chunk.pack import encode_chunks
from sqe.wire.columns import Tally

REGIONS = [f"region-{i}" for i in range(50)]
WANTED = "region-7"
SOURCE_PARTITIONS = 16


def make_records(messages: int, chunk: int, size: int, seed: int = 7) -> Records:
    """Chunk records as the Kafka state writes them (keyed by their last message)."""
    rng = np.random.default_rng(seed)
    region_of = rng.integers(0, len(REGIONS), messages)
    spart = region_of % SOURCE_PARTITIONS
    order = np.argsort(spart, kind="stable")  # each source partition's messages together
    spart, region_of = spart[order], region_of[order]
    offset = np.zeros(messages, dtype=np.int64)
    for p in range(SOURCE_PARTITIONS):
        rows = np.flatnonzero(spart == p)
        offset[rows] = np.arange(len(rows))
    pad = "x" * max(0, size - 60)
    values = pa.array([json.dumps({"id": i, "region": REGIONS[r], "pad": pad}).encode()
                       for i, r in enumerate(region_of.tolist())], pa.binary())
    fv = pa.array([REGIONS[r] for r in region_of.tolist()], pa.string())
    chunks = encode_chunks(np.full(messages, 99), spart, offset, fv, values, max_messages=chunk,
                           max_bytes=1 << 24)
    rec = Records()
    for c in chunks:
        rec.keys.append(c.key)
        rec.values.append(c.data)
        rec.offsets.append(len(rec.offsets))
        rec.stamps.append(0)
    return rec


def readers(topic: str, brokers: str) -> dict[str, SourceConfig]:
    post = json.dumps({"In": ["_filter_value", {"C": WANTED}]})
    base = {"topic": topic, "brokers": brokers, "chunks": "true", "emitTally": "true"}
    return {"a_no_filter": SourceConfig.from_options(base),
            "b_post_filter": SourceConfig.from_options({**base, "postFilter": post}),
            "c_bloom_post_filter": SourceConfig.from_options(
                {**base, "filterValues": json.dumps([WANTED])})}


def _median(reps: int, step: Callable[[], tuple[int, Tally]]) -> tuple[float, int, Tally]:
    times, rows, tally = [], 0, Tally()
    for _ in range(reps):
        start = time.perf_counter()
        rows, tally = step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), rows, tally


def stage(rec: Records, reps: int) -> dict[str, dict]:
    """to_rows alone, on records already fetched."""
    part = RangePartition("bench", 0, 0, len(rec))
    out = {}
    for name, cfg in readers("bench", "unused:9092").items():
        def step(cfg: SourceConfig = cfg) -> tuple[int, Tally]:
            batch, tally = to_rows(cfg, part, rec, None, None)
            return batch.num_rows, tally
        out[name] = _result(*_median(reps, step))
    return out


def through_broker(rec: Records, brokers: str, reps: int) -> dict[str, dict]:
    """read_range of a real topic holding the chunk records."""
    topic = create_topic(brokers, "bench-chunks", 1)
    fill(brokers, topic, ((key, value, 0) for key, value in zip(rec.keys, rec.values, strict=True)))
    part = RangePartition(topic, 0, 0, len(rec))
    cfgs = readers(topic, brokers)
    sum(b.num_rows for b in read_range(cfgs["a_no_filter"], part))  # warm the page cache
    out = {}
    for name, cfg in cfgs.items():
        def step(cfg: SourceConfig = cfg) -> tuple[int, Tally]:
            tally, rows = Tally(), 0
            for b in read_range(cfg, part):
                data = b.column("_offset").is_valid().to_numpy(zero_copy_only=False)
                rows += int(data.sum())
                if not data.all():
                    row = b.filter(pa.array(~data)).to_pylist()[0]
                    tally.add(Tally.from_row(row))
            return rows, tally
        out[name] = _result(*_median(reps, step))
    return out


def _result(seconds: float, rows: int, tally: Tally) -> dict:
    return {"seconds": seconds, "rows": rows, "messages_decoded": tally.messages_decoded,
            "bytes_decoded": tally.bytes_decoded,
            "bytes_not_decoded": tally.bytes_not_decoded,
            "chunks_read": tally.chunks_read, "chunks_skipped_bloom": tally.chunks_skipped_bloom,
            "chunks_false_positive": tally.chunks_false_positive}


def _table(title: str, results: dict[str, dict], messages: int) -> list[str]:
    lines = [title, f"  {'reader':22s} {'msgs/s':>12s} {'rows':>8s} {'bytes decoded':>14s} "
                    f"{'chunks skipped':>15s} {'false pos.':>10s}"]
    for name, r in results.items():
        lines.append(f"  {name:22s} {messages / r['seconds']:>12,.0f} {r['rows']:>8d} "
                     f"{r['bytes_decoded']:>14,d} {r['chunks_skipped_bloom']:>6d} of "
                     f"{r['chunks_read']:<6d} {r['chunks_false_positive']:>10d}")
    b, c = results["b_post_filter"], results["c_bloom_post_filter"]
    lines.append(f"  (c) decodes {c['bytes_decoded'] / b['bytes_decoded']:.3f} of the bytes (b) "
                 f"decodes and runs {b['seconds'] / c['seconds']:.1f}x as fast; (a)/(b) speed "
                 f"{b['seconds'] / results['a_no_filter']['seconds']:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=100, help="messages per chunk")
    ap.add_argument("--size", type=int, default=1000, help="bytes per message (about)")
    service_options(ap, redis=False)
    ap.add_argument("--no-broker", action="store_true", help="measure the read stage only")
    ap.add_argument("--json", action="store_true", help="also print one JSON object last")
    args = ap.parse_args(argv)

    rec = make_records(args.messages, args.chunk, args.size)
    total = sum(len(v or b"") for v in rec.values)
    print(f"{args.messages:,} messages of ~{args.size} bytes in {len(rec):,} chunks "
          f"({total:,} bytes), 50 regions over {SOURCE_PARTITIONS} source partitions, "
          f"reader wants {WANTED}")
    result = {"messages": args.messages, "chunks": len(rec), "bytes": total,
              "stage": stage(rec, 5)}
    print("\n".join(_table("read stage (to_rows on fetched records), median of 5:",
                           result["stage"], args.messages)))
    if not args.no_broker:
        broker = with_services(
            lambda stack, work: through_broker(rec, kafka_broker(stack, work, args.brokers), 3))
        if broker is None:
            return 1
        result["broker"] = broker
        print("\n".join(_table("read_range through the broker (fetch included), median of 3:",
                               result["broker"], args.messages)))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
