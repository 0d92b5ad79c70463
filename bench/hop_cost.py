"""What a hop written in PySpark costs a batch, against the same hop as a topology file.

    PYTHONPATH=. .venv/bin/python bench/hop_cost.py [--records 2000] [--batches 10]
        [--repeat 2] [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

The load step of the README's chain (two Redis hashes in the HWM store's database, replays
filtered) three ways, in one Spark session, over the same ``--records`` x (``--batches`` + 1)
records of ``enriched`` (keyed by StreamMetadata, as enrich writes them), in batches of
``--records`` (``jw.sqe.spout.kafka.maxRecordsPerBatch``):

* ``topology``: topologies/load.yaml by ``sqe.run`` (its stream planned once: one Spark job
  a batch);
* ``exactly_once``: an ``sqe.Hop`` whose ``foreachBatch`` function writes both states
  (``hop.exactly_once``: a job for the marks, then each state's writes);
* ``sink``: the same hop through the ``sqe-hop`` sink (``hop.write_stream``: one job a batch,
  the commit in Spark's ``commit(messages, batchId)``).

Per variant: the median over repetitions (interleaved, order rotated) of the median cycle
(one batch's start to the next's, first batch left out: the JVM's warm-up), the records per
second that sustains, and the ratio to ``topology``.  Each run's Redis is checked: every
record once.  Exit 1 when a run fails or its output is wrong.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sqe
from bench.harness import ROOT, BenchError
from bench.harness.cycles import (
    cycle,
    cycle_args,
    interleaved,
    local_spark,
    progress_starts,
    report_cycles,
)
from bench.harness.services import conf_pairs, kafka_and_redis, with_services
from bench.harness.topics import PARTITIONS, create_topic, fill
from bench.harness.topologies import topology_copy
from sqe.wire.keys import StreamMetadata

VARIANTS = ("topology", "exactly_once", "sink")
FIELDS = {"event_id": "string", "region": "string", "amount_cents": "bigint"}


def _states() -> list[sqe.InsertInto]:
    """load.yaml's two Redis hashes."""
    def hash_of(name: str, fields: list[str]) -> sqe.InsertInto:
        return sqe.InsertInto(objectName=name, stateName="REDIS", fields=fields, options={
            "jw.sqe.state.redis.datatype": "HASH",
            "jw.sqe.state.redis.keyname.fields": fields[:1],
            "jw.sqe.state.redis.fieldname.fields": fields[1:2]})
    return [hash_of("events_by_region", ["region", "event_id", "amount_cents"]),
            hash_of("load_log", ["log", "position", "event_id"])]


def run_variant(variant: str, spark: SparkSession, topic: str, conf: dict[str, str],
                work: Path, tag: str) -> float:
    """One run of ``variant`` over ``topic``; its median cycle in seconds."""
    if variant == "topology":
        path = topology_copy("load", topic, None, work)
        result = sqe.run(sqe.prepare(path, config=[ROOT / "conf/local.yaml"], conf=conf,
                                     name=tag, checkpoint=work / tag), once=True, spark=spark)
        return cycle([r.started for r in result.reports if r.records_read])
    hop = sqe.Hop(f"{tag}.enriched", topic=topic, checkpoint=work / tag, deserializer="json",
                  config=[ROOT / "conf/local.yaml"],
                  conf={**conf, "jw.sqe.spout.kafka.filterReplays": True,
                        "jw.sqe.spout.fields": FIELDS},
                  into=_states())
    rows = (hop.read(spark).withColumn("log", F.lit("load_log"))
            .withColumn("position", F.concat_ws(":", "_partition", "_offset")))
    if variant == "sink":
        query = hop.write_stream(rows).trigger(availableNow=True).start()
    else:
        def write(batch_rows: DataFrame, batch: sqe.HopBatch) -> None:
            batch.write("events_by_region", batch_rows)
            batch.write("load_log", batch_rows)
        query = (rows.writeStream.option("checkpointLocation", hop.checkpoint)
                 .trigger(availableNow=True).foreachBatch(hop.exactly_once(write)).start())
    query.awaitTermination()
    if variant == "exactly_once":  # the two clocks agree? (the topology's is the reports')
        print(f"  exactly_once by its reports: "
              f"{cycle([r.started for r in hop.reports if r.records_read]):.3f} s, by Spark's "
              f"progress: {cycle(progress_starts(query)):.3f} s", file=sys.stderr)
    return cycle(progress_starts(query))


def _check(url: str, expected: int, variant: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        log = client.hvals("load_log")
        if len(log) != expected or len(set(log)) != expected:
            raise BenchError(f"{variant}: load_log holds {len(log)} fields "
                             f"({len(set(log))} events) for {expected} records")
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    a = cycle_args(__doc__, argv, records=2000, batches=10, repeat=2)
    total = a.records * (a.batches + 1)

    def body(stack: ExitStack, work: Path) -> dict[str, list[float]]:
        brokers, url = kafka_and_redis(stack, work, a.brokers, a.redis)
        conf = {**conf_pairs(brokers, url), "jw.sqe.spout.kafka.startingOffsets": "earliest",
                "jw.sqe.spout.kafka.maxRecordsPerBatch": str(a.records)}
        topic = create_topic(brokers, "bench-hop-enriched")
        fill(brokers, topic, _records(total, PARTITIONS))
        spark = local_spark(stack)
        return interleaved(VARIANTS, a.repeat, url,
                           lambda v, tag: run_variant(v, spark, topic, conf, work, tag),
                           lambda v: _check(url, total, v))

    cycles = with_services(body, "hop-cost-")
    if cycles is None:
        return 1
    report_cycles(cycles, "topology", a.records, a, f"load in batches of {a.records:,} records")
    return 0


def _records(count: int, partitions: int) -> list[tuple[bytes, bytes, int]]:
    """``count`` records as enrich writes them: StreamMetadata keys, one source partition per
    destination partition."""
    out = []
    for i in range(count):
        p = i % partitions
        event = {"event_id": f"e{i}", "region": ["EU", "US", "APAC"][i % 3],
                 "amount_cents": i * 100}
        out.append((StreamMetadata(4242, p, i // partitions).to_bytes(),
                    json.dumps(event).encode(), p))
    return out


if __name__ == "__main__":
    sys.exit(main())
