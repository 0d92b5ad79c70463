"""Cost of exactly-once commits: a Redis state written directly vs staged and applied by the
HWM commit script, and the Postgres state (COPY + batch id in one transaction).

    PYTHONPATH=. python bench/state_commit.py --redis redis://127.0.0.1:6379/9 \
        --postgres postgresql://postgres@127.0.0.1:5432/postgres [--rows 200000]

Each way writes the same ``--rows`` rows (HASH: 50 keys, one field per row)
three times, as batches 0, 1, 2 of one consumer, and prints the median rows per
second of the whole step (Spark job + Redis or Postgres work).  The Redis
database given is flushed; the Postgres table is created in a schema of its
own that is dropped at the end.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

import redis

from bench.harness.report import parser
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.engine.spark.session import build_session
from sqe.ledger.hwm import HwmStore, Stage
from state.postgres.sink import PostgresStateConfig, write_postgres
from state.redis.sink import RedisStateConfig, stage_redis, write_redis


def _median_rate(rows: int, step: Callable[[int], None]) -> float:
    times = []
    for batch in range(3):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    return rows / statistics.median(times)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--redis", required=True, help="a Redis URL with a database to flush")
    ap.add_argument("--postgres", help="a Postgres DSN (skipped when absent)")
    ap.add_argument("--rows", type=int, default=200_000)
    args = ap.parse_args()
    spark = build_session("bench-state-commit")
    df = spark.range(args.rows).selectExpr(
        "concat('region', id % 50) AS region", "concat('e', id) AS event_id",
        "id * 100 AS amount_cents").cache()
    df.count()
    client = redis.Redis.from_url(args.redis)
    client.flushdb()
    endpoint = RedisEndpoint(args.redis)
    cfg = RedisStateConfig("bench", endpoint, "HASH", ("region",), ("event_id",), ":", 0,
                           ("amount_cents",))
    results = {}
    results["redis direct (idempotent HSET, not atomic)"] = _median_rate(
        args.rows, lambda _b: write_redis(df, cfg))
    client.flushdb()
    store = HwmStore.from_url(args.redis, "bench.S", 3600)

    def staged(batch: int) -> None:
        key = store.stage_key(batch, None, 0)
        stage_redis(df, cfg, endpoint, key)
        store.commit(batch, {(1, 0): batch}, [Stage(key, "HASH")])

    results["redis staged + atomic Lua commit"] = _median_rate(args.rows, staged)
    assert sum(client.hlen(f"region{i}") for i in range(50)) == args.rows
    client.flushdb()
    if args.postgres:
        import psycopg
        from psycopg.conninfo import make_conninfo

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        dsn = make_conninfo(args.postgres, options=f"-c search_path={schema}")
        pg = PostgresStateConfig("events", dsn, ("region", "event_id", "amount_cents"))
        try:
            results["postgres COPY + batch id, one transaction"] = _median_rate(
                args.rows, lambda b: write_postgres(df, pg, "bench.S", b))
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    for name, rate in results.items():
        print(f"{name:45s} {rate:12,.0f} rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
