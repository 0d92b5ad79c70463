"""The nemesis's checker: each event id's count in the input topic, in load's Redis log and in
its Postgres table, Jepsen's anomalies per store (lost, duplicated, unknown, unseen), and the
records of enrich's Kafka output out of source-offset order that no replay explains
(:mod:`bench.nemesis` runs it once the chain has drained)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.nemesis_world import POSTGRES_TABLE, World


def counts(world: World) -> dict[str, Counter[str]]:
    """Each event id's count in the input topic, in load_log and in the Postgres table."""
    import psycopg

    from sqe.clients.kafka import read_all

    found: dict[str, Counter[str]] = {
        "input": Counter(json.loads(m.value())["event_id"]
                         for m in read_all(world.direct_brokers, world.events))}
    client = world.redis.client()
    try:
        found["redis"] = Counter(v.decode() for v in client.hvals("load_log"))
    finally:
        client.close()
    with psycopg.connect(world.postgres.dsn) as conn:
        try:
            rows = conn.execute(f"SELECT event_id, count(*) FROM {POSTGRES_TABLE} "
                                "GROUP BY event_id").fetchall()
        except psycopg.errors.UndefinedTable:  # load never wrote a row: every event is lost
            rows = []
    found["postgres"] = Counter({event_id: n for event_id, n in rows})
    return found


def verdict(found: dict[str, Counter[str]], acked: set[str]) -> dict[str, dict[str, int]]:
    """Per store, Jepsen's anomalies: events of the input topic lost or duplicated, events no
    input holds (unknown), and events the broker acknowledged that the store never got after
    the drain (unseen; an acknowledged event the topic lost is unseen in every store)."""
    want = found["input"]
    out = {}
    for store in ("redis", "postgres"):
        got = found[store]
        out[store] = {"lost": sum(max(0, n - got[i]) for i, n in want.items()),
                      "duplicated": sum(max(0, n - want[i]) for i, n in got.items() if i in want),
                      "unknown": sum(n for i, n in got.items() if i not in want),
                      "unseen": sum(1 for i in acked if not got[i])}
    return out


def out_of_order(world: World) -> list[str]:
    """The records of enrich's Kafka state that no replay explains out of order
    (:func:`disorder`)."""
    from sqe.clients.kafka import read_all

    return disorder(world.enriched, ((m.partition(), m.offset(), m.key())
                                     for m in read_all(world.direct_brokers, world.enriched)))


def disorder(topic: str, records: Iterable[tuple[int, int, bytes]]) -> list[str]:
    """Of ``records`` (Kafka partition, offset and StreamMetadata key, each partition in
    order), those that arrive below a higher offset of their (pid, source partition) without
    being a copy of an earlier one: the next hop would drop them as replays.  Copies (a batch
    written again) are what replays explain; each anomaly is listed with its key."""
    from sqe.wire.keys import StreamMetadata

    seen: dict[tuple[int, int], set[int]] = {}
    top: dict[tuple[int, int], int] = {}
    found = []
    for partition, offset, key in records:
        k = StreamMetadata.from_bytes(key)
        pair = (k.pid, k.partition)
        if k.offset < top.get(pair, -1) and k.offset not in seen.get(pair, set()):
            found.append(f"{topic}/{partition}@{offset}: (pid {k.pid}, partition "
                         f"{k.partition}) offset {k.offset} after {top[pair]}")
        seen.setdefault(pair, set()).add(k.offset)
        top[pair] = max(top.get(pair, -1), k.offset)
    return found


def failed(r: dict[str, Any]) -> bool:
    """Whether the chain broke its promise: a store's anomaly (unseen events the broker lost
    from its own topic are the broker's), disorder, or no drain."""
    return not r["drained"] or bool(r["out_of_order"]) or any(
        n - (r["broker_lost"] if kind == "unseen" else 0)
        for v in r["stores"].values() for kind, n in v.items())
