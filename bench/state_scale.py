"""What one batch costs the Redis aggregate and Postgres states as what they hold grows.

Used by ``bench/hwm_scale.py`` (its "states" table); the functions call the
states' own pieces as a batch does, without Spark, so only the store's work is
timed:

* Redis aggregate: one batch merges ``touched`` Sum entries with
  :data:`state.redis.aggregate_layout.MERGE_SCRIPT` (TRANSACTIONAL, one script call, as an
  executor sends them) into a state holding N entries;
* Postgres: one batch's transaction as :mod:`state.postgres.sink` runs it -- connect,
  lock the consumer's row of the batch table (:func:`state.postgres.batches.lock_batch`),
  ``COPY`` ``rows`` rows in, record the batch id, ``COMMIT`` -- into a table holding N
  rows, with N other consumers' rows (at most 100,000) in the batch table.
"""

from __future__ import annotations

import statistics
import time
import uuid

import redis

from state.redis.aggregate_layout import MERGE_SCRIPT

_CHUNK = 500  # entries per merge call, as the executors send them
_FILL_CALLS = 200  # merge calls per pipeline while filling


def _merge(script: redis.commands.core.Script, client: redis.client.Pipeline | redis.Redis,
           name: str, entries: list[int], batch_id: int) -> None:
    args: list[str | int] = ["TRANSACTIONAL", batch_id, 0]
    for _ in entries:
        args += ["", "sum", "L", "1", "0"]
    script(keys=[f"{name}:{i}" for i in entries], args=args, client=client)


def aggregate_batch(url: str, stored: int, touched: int, repeat: int) -> dict[str, float]:
    """Median ms (client and Redis server) of a batch merging ``touched`` entries into an
    aggregate state of ``stored`` entries, and the entries stored after."""
    client = redis.Redis.from_url(url)
    script = client.register_script(MERGE_SCRIPT)
    name = f"bench-agg-{uuid.uuid4().hex[:6]}"
    try:
        pipe = client.pipeline(transaction=False)
        for n, start in enumerate(range(0, stored, _CHUNK)):
            _merge(script, pipe, name, list(range(start, min(stored, start + _CHUNK))), 0)
            if n % _FILL_CALLS == _FILL_CALLS - 1:
                pipe.execute()
        pipe.execute()
        client_ms, server_ms = [], []
        for batch in range(1, repeat + 2):  # the first is a warm-up, not counted
            entries = sorted({(batch * 7919 + k * 104729) % stored for k in range(touched)})
            u0 = script_usec(client)
            t0 = time.perf_counter()
            _merge(script, client, name, entries, batch)
            if batch > 1:
                client_ms.append(1000 * (time.perf_counter() - t0))
                server_ms.append((script_usec(client) - u0) / 1000)
        return {"stored": stored, "touched": touched,
                "ms": statistics.median(client_ms), "server_ms": statistics.median(server_ms)}
    finally:
        keys = list(client.scan_iter(match=f"{name}:*", count=10_000))
        for start in range(0, len(keys), 10_000):
            client.delete(*keys[start:start + 10_000])
        client.close()


def script_usec(client: redis.Redis) -> float:
    """Microseconds the server has spent in scripts (EVAL and EVALSHA) so far."""
    stats = client.info("commandstats")
    return float(sum(v.get("usec", 0) for k, v in stats.items()
                     if k in ("cmdstat_eval", "cmdstat_evalsha")))


def postgres_batch(dsn: str, stored: int, rows: int, repeat: int) -> dict[str, float]:
    """Median ms of one batch's transaction writing ``rows`` rows into a Postgres state whose
    table holds ``stored`` rows (and its batch table ``min(stored, 100,000)`` other
    consumers)."""
    import psycopg
    from psycopg import sql

    from state.postgres.batches import lock_batch, qualified, record_batch

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    table = qualified(schema, "events")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            lock_batch(cur, schema, "bench.fill", "events", "bench")  # creates the batch table
            cur.execute(sql.SQL("CREATE TABLE {} (event_id text, amount bigint)").format(table))
            cur.execute(sql.SQL("INSERT INTO {} SELECT 'e' || i, i FROM generate_series(1, %s) i"
                                ).format(table), [stored])
            cur.execute(sql.SQL("INSERT INTO {} (consumer, target, batch_id, rows) SELECT "
                                "'other.' || i, 'events', 7, 1000 FROM generate_series(1, %s) i"
                                ).format(qualified(schema, "sqe_batches")),
                        [min(stored, 100_000)])
            conn.commit()
            cur.execute(sql.SQL("ANALYZE {}").format(table))
            conn.commit()
        payload = "".join(f"e{i},{i}\n" for i in range(rows)).encode()
        copy = sql.SQL("COPY {} (event_id, amount) FROM STDIN (FORMAT csv)").format(table)
        times = []
        for batch in range(repeat + 1):  # the first is a warm-up, not counted
            t0 = time.perf_counter()
            with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
                lock_batch(cur, schema, "bench.Events", "events", "bench")
                with cur.copy(copy) as sink:
                    sink.write(payload)
                record_batch(cur, schema, "bench.Events", "events", batch, rows, None, None)
                conn.commit()
            if batch:
                times.append(1000 * (time.perf_counter() - t0))
        return {"stored": stored, "rows": rows, "ms": statistics.median(times)}
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


_PROBES = {  # one script call doing one command per field; "none" is the call's own cost
    "none": "for i = 1, #ARGV do end return 1",
    "HGET": "for i = 1, #ARGV do redis.call('HGET', KEYS[1], ARGV[i]) end return 1",
    "ZADD": "local t = redis.call('TIME') for i = 1, #ARGV do "
            "redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + i, ARGV[i]) end return 1",
}


def lookup_cost(url: str, size: int, touched: int, repeat: int) -> dict[str, float]:
    """Median microseconds of one script call doing ``touched`` HGETs (ZADDs) of random
    fields of a hash (sorted set) of ``size`` entries, less the call's own cost: what a
    commit pays per mark when the memory it touches is cold, as the structures grow."""
    import random

    client = redis.Redis.from_url(url)
    tag = uuid.uuid4().hex[:6]
    keys = [f"bench-probe-{tag}:h", f"bench-probe-{tag}:z"]
    rng = random.Random(size)
    try:
        for start in range(0, size, 50_000):
            fields = [f"7:{i}" for i in range(start, min(size, start + 50_000))]
            pipe = client.pipeline(transaction=False)
            pipe.hset(keys[0], mapping=dict.fromkeys(fields, 100))
            pipe.zadd(keys[1], dict.fromkeys(fields, 1))
            pipe.execute()
        out = {}
        for name, body in _PROBES.items():
            sha = client.script_load(body)
            times = []
            for _ in range(repeat):
                args = [f"7:{rng.randrange(size)}" for _ in range(touched)]
                t0 = time.perf_counter()
                client.evalsha(sha, 2, *keys, *args)
                times.append(1e6 * (time.perf_counter() - t0))
            out[name] = statistics.median(times)
        return {"size": size, **{k: v - out["none"] for k, v in out.items() if k != "none"}}
    finally:
        client.delete(*keys)
        client.close()
