"""What one batch's high-water marks cost as a consumer's store grows.

    python bench/hwm_scale.py [--redis redis://127.0.0.1:6379/9] \
        [--marks 1000,10000,100000,1000000] [--touched 64] [--repeat 5] [--json]

For each size N, side by side in one run: the consumer's store is filled with N
marks through :meth:`state.hwm.HwmStore.commit` (as N upstream (pid, partition)
pairs would leave them), then ``--repeat`` batches each commit ``--touched``
marks and read the store as a batch does before it reads records
(:meth:`~state.hwm.HwmStore.admit`), timed from the client, with the Redis
server's own time per call from ``INFO commandstats`` and the memory per mark
from ``used_memory``.  The ratios of the largest size to the smallest are the
numbers to watch: a batch should cost what it touches, not what is stored.

Only the store's public methods are used, so the same command measures any
layout of the store.  The Redis database given is flushed; without ``--redis``
a Redis of its own is started.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import redis
from local_redis import flushed_redis

from state.hwm import HwmStore

_FILL_CHUNK = 20_000  # marks per filling commit (one Lua call each)


class BenchError(Exception):
    """The benchmark cannot run as asked (one sentence)."""


def _server_usec(client: redis.Redis) -> float:
    """Microseconds the server spent in scripts so far (EVAL and EVALSHA)."""
    stats = client.info("commandstats")
    return float(sum(v.get("usec", 0) for k, v in stats.items()
                     if k in ("cmdstat_eval", "cmdstat_evalsha")))


def measure(url: str, marks: int, touched: int, repeat: int) -> dict[str, float]:
    """Fill a consumer with ``marks`` marks, then time ``repeat`` batches touching ``touched``."""
    consumer = f"bench.scale{marks}"
    store = HwmStore.from_url(url, consumer, 172_800)
    client = store.client
    try:
        before = int(client.info("memory")["used_memory"])
        batch = 0
        for start in range(0, marks, _FILL_CHUNK):
            store.commit(batch, {(7, p): 100 for p in range(start, min(marks, start + _FILL_CHUNK))})
            batch += 1
        memory = int(client.info("memory")["used_memory"]) - before
        commit_s, read_s, server_us = [], [], []
        for i in range(repeat):
            batch += 1
            offset = 200 + i
            updates = {(7, (i * 7919 + k * 104729) % marks): offset for k in range(touched)}
            t0 = time.perf_counter()
            snapshot = store.admit(batch)
            t1 = time.perf_counter()
            usec = _server_usec(client)
            store.commit(batch, updates)
            t2 = time.perf_counter()
            server_us.append(_server_usec(client) - usec)
            if snapshot is None:
                raise BenchError(f"batch {batch} of {consumer} was committed already")
            read_s.append(t1 - t0)
            commit_s.append(t2 - t1)
        return {"marks": marks, "touched": touched,
                "commit_ms": 1000 * statistics.median(commit_s),
                "read_ms": 1000 * statistics.median(read_s),
                "commit_server_ms": statistics.median(server_us) / 1000,
                "bytes_per_mark": memory / marks if marks else 0.0}
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="Redis URL whose database is flushed (default: own)")
    parser.add_argument("--marks", default="1000,10000,100000,1000000",
                        help="comma-separated store sizes")
    parser.add_argument("--touched", type=int, default=64, help="marks one batch commits")
    parser.add_argument("--repeat", type=int, default=5, help="batches timed per size")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.marks.split(",")]
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        try:
            url = flushed_redis(stack, work, args.redis)
        except ConnectionError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            rows = [measure(url, n, min(args.touched, n), args.repeat) for n in sizes]
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"{'marks stored':>14} {'commit ms':>10} {'server ms':>10} {'read ms':>10} "
          f"{'bytes/mark':>11}")
    for r in rows:
        print(f"{r['marks']:>14,} {r['commit_ms']:>10.2f} {r['commit_server_ms']:>10.2f} "
              f"{r['read_ms']:>10.2f} {r['bytes_per_mark']:>11.1f}")
    first, last = rows[0], rows[-1]
    result = {"sizes": rows,
              "commit_ratio": last["commit_ms"] / first["commit_ms"],
              "read_ratio": last["read_ms"] / first["read_ms"]}
    print(f"batch touching {args.touched} marks, {last['marks']:,} stored vs {first['marks']:,}: "
          f"commit {result['commit_ratio']:.2f}x, read {result['read_ratio']:.2f}x "
          "(target: 1.25x or less)")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
