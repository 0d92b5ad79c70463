"""The shipped chain (enrich.yaml -> `enriched` -> load.yaml) on fresh topics, run in the test's
process on the suite's Spark session, for tests that change its topics or its topologies.

load.yaml's audit query writes each loaded event's id to a topic of its own (a record per
message, chunked or not), which :meth:`Chain.loaded` counts: a lost or doubled event shows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient, NewPartitions

from sqe.cli.sample_events import sample_events
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.observe.batch_report import BatchReport
from tests.support import ROOT
from tests.support.kafka_io import produce, read_topic

SOURCE_PARTITIONS = 4


def add_partitions(kafka: str, topic: str, count: int) -> None:
    """``kafka-topics --alter --partitions count``."""
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_partitions([NewPartitions(topic, count)])[topic].result(30)


class Chain:
    """The shipped topologies on fresh topics, run in this process on the suite's session."""

    def __init__(self, spark, kafka: str, redis_url: str, tmp: Path, events: str,
                 enriched: str, loaded: str, chunking: bool = False) -> None:
        self.spark, self.kafka, self.redis_url, self.tmp = spark, kafka, redis_url, tmp
        self.events, self.enriched, self.loaded_topic = events, enriched, loaded
        enrich = yaml.safe_load((ROOT / "topologies/enrich.yaml").read_text())
        enrich[0]["CreateStream"]["objectName"] = events
        enrich[1]["Query"]["insertInto"]["objectName"] = enriched
        load = yaml.safe_load((ROOT / "topologies/load.yaml").read_text())
        load[0]["CreateStream"]["objectName"] = enriched
        load[2]["Query"]["insertInto"] = {
            "objectName": loaded, "stateName": "KAFKA", "fields": ["event_id"],
            "options": {"jw.sqe.state.kafka.keytype": "messagehash"}}
        load[2]["Query"]["select"] = {"expressions": ["event_id"]}
        if chunking:
            enrich[1]["Query"]["insertInto"]["options"].update({
                "jw.sqe.state.kafka.chunking": True, "jw.sqe.state.kafka.chunk.maxMessages": 50})
            load[0]["CreateStream"]["options"]["jw.sqe.spout.kafka.chunks"] = True
        self.commands = {"enrich": enrich, "load": load}

    def conf(self) -> dict:
        host, port, db = re.match(r"redis://([^:/]+):(\d+)/(\d+)", self.redis_url).groups()
        return {"jw.sqe.spout.kafka.brokers": self.kafka,
                "jw.sqe.state.kafka.brokers": self.kafka,
                "jw.sqe.spout.kafka.filterReplays.redis.url": self.redis_url,
                "jw.sqe.state.redis.host": host, "jw.sqe.state.redis.port": int(port),
                "jw.sqe.state.redis.database": int(db)}

    def run(self, name: str, adopt: bool = False, as_name: str | None = None,
            **options) -> list[BatchReport]:
        """Run topology ``name`` once on its checkpoint (``as_name``: under another name)."""
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(self.commands[name], sort_keys=False))
        plan = plan_topology(load_topology(path, as_name), conf={**self.conf(), **options})
        return run_topology(plan, self.spark, as_name or name, self.tmp / "ck" / name, "once",
                            adopt_layout=adopt)

    def produce(self, first: int, count: int, partitions: int = SOURCE_PARTITIONS) -> None:
        """Events ``first`` .. ``first + count - 1``, spread evenly over ``partitions``."""
        produce(self.kafka, self.events, [(None, json.dumps(e).encode(), i % partitions)
                                          for i, e in enumerate(sample_events(count, 1, first))])

    def loaded(self) -> Counter:
        """How often load wrote each event id (its value: the id, or a JSON object of fields)."""
        values = [r.value.decode() for r in read_topic(self.kafka, self.loaded_topic)]
        return Counter(json.loads(v)["event_id"] if v.startswith("{") else v for v in values)

    def by_partition(self) -> Counter:
        return Counter(r.partition for r in read_topic(self.kafka, self.enriched))


def new_chain(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, chunking=False) -> Chain:
    return Chain(spark, kafka_bootstrap, redis_url, tmp_path,
                 kafka_topic(SOURCE_PARTITIONS, "events"), kafka_topic(2, "enriched"),
                 kafka_topic(1, "loaded"), chunking)


def assert_each_once(chain: Chain, events: int | set[str]) -> None:
    """Load wrote each of ``events`` (ids, or the first N: e0 ...) once, and nothing else."""
    expected = events if isinstance(events, set) else {f"e{i}" for i in range(events)}
    loaded = chain.loaded()
    missing = sorted(expected - set(loaded))
    doubled = [e for e, n in loaded.items() if n > 1]
    extra = sorted(set(loaded) - expected)
    assert not missing and not doubled and not extra, (
        f"{len(missing)} events lost (first {missing[:5]}), {len(doubled)} doubled, "
        f"{len(extra)} not expected (first {extra[:5]})")
