"""The chain of the shipped topologies as the benchmarks run it, and the check of what it
leaves: ``topologies/enrich.yaml`` and ``load.yaml`` pointed at fresh topics
(:func:`retarget`, :func:`topology_copy`), what load.yaml must leave in Redis for the sample
events ``e0 .. e<n-1>`` (:func:`expected_store`), and how Redis differs from it
(:func:`check_store`, :func:`check_chain`, :func:`count_events`)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import ROOT, BenchError
from bench.harness.services import Services, redis_client
from bench.harness.topics import topic_size


def retarget(commands: list[dict[str, Any]], source: str, sink: str | None) -> None:
    """Point a shipped topology's Kafka stream at ``source`` and its Kafka state (if ``sink``)
    at ``sink``, in place."""
    streams = [c["CreateStream"] for c in commands if "CreateStream" in c]
    states = [c["Query"]["insertInto"] for c in commands
              if "Query" in c and c["Query"]["insertInto"].get("stateName") == "KAFKA"]
    if len(streams) != 1 or (sink is not None and len(states) != 1):
        raise BenchError("the shipped topologies changed shape: the chain expects one "
                         "CreateStream in each and one Kafka state in enrich.yaml")
    streams[0]["objectName"] = source
    if sink is not None:
        states[0]["objectName"] = sink


def topology_copy(name: str, source: str, sink: str | None, work: Path,
                  untyped: bool = False) -> Path:
    """``topologies/<name>.yaml`` pointed at ``source`` (and ``sink``), written under ``work``;
    ``untyped``: its stream declares no JSON fields, as an original SQE file."""
    import yaml

    commands = yaml.safe_load((ROOT / "topologies" / f"{name}.yaml").read_text())
    retarget(commands, source, sink)
    if untyped:
        for c in commands:
            if "CreateStream" in c:
                c["CreateStream"].get("options", {}).pop("jw.sqe.spout.fields", None)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(commands, sort_keys=False))
    return path


@dataclass
class Expected:
    """What load.yaml leaves in Redis for the sample events ``e0 .. e<n-1>``."""

    by_region: dict[str, dict[str, str]]
    ids: set[str]


def expected_store(events: int) -> Expected:
    from sqe.cli.sample_events import sample_events

    by_region: dict[str, dict[str, str]] = {}
    for e in sample_events(events):
        by_region.setdefault(e["region"].upper(), {})[e["event_id"]] = str(e["amount"] * 100)
    return Expected(by_region, {f"e{i}" for i in range(events)})


def check_store(url: str, want: Expected) -> list[str]:
    """How the Redis content differs from what load.yaml must leave (empty: it matches)."""
    problems = []
    with redis_client(url) as client:
        for region, rows in sorted(want.by_region.items()):
            got = {k.decode(): v.decode() for k, v in client.hgetall(region).items()}
            if got != rows:
                missing = len(rows.keys() - got.keys())
                extra = len(got.keys() - rows.keys())
                wrong = sum(1 for k in rows.keys() & got.keys() if rows[k] != got[k])
                problems.append(f"events_by_region hash {region} has {len(got):,} fields for "
                                f"{len(rows):,} events ({missing:,} missing, {extra:,} extra, "
                                f"{wrong:,} with another amount_cents)")
        logged = [v.decode() for v in client.hvals("load_log")]
    ids = set(logged)
    if len(logged) != len(want.ids) or ids != want.ids:
        problems.append(f"load_log holds {len(logged):,} fields with {len(ids):,} distinct "
                        f"event ids for {len(want.ids):,} events ({len(want.ids - ids):,} "
                        f"missing, {len(ids - want.ids):,} unknown)")
    return problems


def count_events(url: str, events: int) -> tuple[dict[str, int], list[str]]:
    """The sample events ``e0 .. e<events-1>`` in load_log: how many are lost, unknown and
    duplicated, and the problems (each count over 0, then :func:`check_store`'s)."""
    want = expected_store(events)
    with redis_client(url) as client:
        logged = Counter(v.decode() for v in client.hvals("load_log"))
    counts = {"lost": len(want.ids - logged.keys()), "unknown": len(logged.keys() - want.ids),
              "duplicated": sum(n - 1 for n in logged.values() if n > 1)}
    problems = [f"{n:,} event ids {k} in load_log" for k, n in counts.items() if n]
    return counts, problems + check_store(url, want)


@dataclass
class Size:
    """One size of a run: its input topic of sample events and what its chain must leave in
    Redis."""

    events: int
    topic: str
    expected: Expected


def check_chain(s: Services, size: Size, enriched: str, enrich: str, load: str) -> None:
    """One record per event in ``enriched``, and every event once in the Redis store."""
    written = topic_size(s.brokers, enriched)
    if written != size.events:
        raise BenchError(f"{enrich} wrote {written:,} records to {enriched} for "
                         f"{size.events:,} events")
    problems = check_store(s.redis_url, size.expected)
    if problems:
        raise BenchError(f"{load}: " + "; ".join(problems))
