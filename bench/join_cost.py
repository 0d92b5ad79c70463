"""What SQE's exactly-once costs a stream-stream join, against the same join without it.

    PYTHONPATH=. .venv/bin/python bench/join_cost.py [--records 1000] [--batches 8]
        [--repeat 2] [--brokers HOST:PORT] [--redis redis://HOST:PORT/DB] [--json]

The join of examples/ad_clicks.py (each impression with its click within 10 minutes, a watermark
of 1 minute on each side) over two topics of ``--records`` x (``--batches`` + 1) records each,
keyed by StreamMetadata as an upstream hop writes them: ``impressions`` (``imp_id``,
``region``, ``ts``) and ``clicks`` (``imp_id``, ``cents``, ``ts``), the click of impression i
beside it, every fourth on an impression that is not in the stream (no match).  Each source's
batches are capped at ``--records`` (``jw.sqe.spout.kafka.maxRecordsPerBatch``), so a batch
reads up to twice that.  Each joined row goes to the Redis hash of its region (field
``imp_id``, value ``cents``: the example's ``clicked_by_region``).  Three ways, in one Spark
session:

* ``spark``, the baseline: the same two ``sqe.Hop`` reads (the ``sqe-kafka`` source, the same
  JSON fields) without ``jw.sqe.spout.kafka.filterReplays`` and without the hops' checkpoint,
  so no replay filter, no marks and no start agreed with the stores; the same join; and a
  plain ``foreachBatch`` that sends the rows straight to the region hashes, as one
  ``mapInArrow`` job of the HSETs SQE stages rows with (built by Arrow, no Python per row:
  :func:`state.redis.tasks.stage_task` aimed at the final hashes instead of a stage).  A
  join of hops cannot be the baseline: ``also`` needs filterReplays on both sides, since the
  batches of a join are counted by the marks.  The difference to the baseline is thus what
  exactly-once adds: the replay filter and the read reports in the source, the admission of
  each batch, the staging of the rows in the HWM store's database and the commit that
  applies them with the marks, and the clicks hop's commit after it.
* ``exactly_once``: ``impressions.exactly_once(write, also=[clicks])`` in ``foreachBatch``
  (both hops filter replays, one checkpoint);
* ``sink``: ``impressions.write_stream(joined, also=[clicks])``, the ``sqe-hop`` sink, append
  mode.

Per variant: the median over repetitions (interleaved, order rotated) of the median cycle
(one batch's start to the next's by Spark's progress, first batch left out: the JVM's
warm-up), the records per second that sustains (both topics' records: twice ``--records`` a
batch), and the ratio to ``spark``.  Each run's Redis is checked: every expected joined row
once, nothing else in the region hashes.  Exit 1 when a run fails or its output is wrong.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

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
from bench.harness.services import conf_pairs, kafka_and_redis, redis_client, with_services
from bench.harness.topics import PARTITIONS, create_topic, fill
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.wire.keys import StreamMetadata
from state.redis.tasks import stage_task
from state.sink import task_counts

VARIANTS = ("spark", "exactly_once", "sink")
REGIONS = ("EU", "US", "APAC")
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
STATE = "clicked_by_region"
IMPRESSION = {"imp_id": "string", "region": "string", "ts": "timestamp"}
CLICK = {"imp_id": "string", "cents": "bigint", "ts": "timestamp"}


def _state() -> sqe.InsertInto:
    """The example's hash per region: field ``imp_id``, value ``cents``."""
    return sqe.InsertInto(objectName=STATE, stateName="REDIS", fields=["region", "imp_id", "cents"],
                          options={"jw.sqe.state.redis.datatype": "HASH",
                                   "jw.sqe.state.redis.keyname.fields": ["region"],
                                   "jw.sqe.state.redis.fieldname.fields": ["imp_id"]})


def _hops(tag: str, topics: tuple[str, str], conf: dict[str, Any], work: Path,
          exact: bool) -> tuple[sqe.Hop, sqe.Hop]:
    """The impressions and clicks hops of run ``tag``: ``exact``, filtering replays on one
    checkpoint (the impressions hop holding the state); else neither, nor a checkpoint."""
    def hop(stream: str, topic: str, fields: dict[str, str],
            into: list[sqe.InsertInto]) -> sqe.Hop:
        return sqe.Hop(f"{tag}.{stream}", topic=topic, checkpoint=work / tag if exact else None,
                       deserializer="json", config=[ROOT / "conf/local.yaml"], into=into,
                       conf={**conf, "jw.sqe.spout.kafka.filterReplays": exact,
                             "jw.sqe.spout.fields": fields})

    return (hop("impressions", topics[0], IMPRESSION, [_state()] if exact else []),
            hop("clicks", topics[1], CLICK, []))


def _joined(spark: SparkSession, impressions: sqe.Hop, clicks: sqe.Hop) -> DataFrame:
    """examples/ad_clicks.py's join of the two hops' records."""
    shown = (impressions.read(spark).select("imp_id", "region", F.col("ts").alias("shown"))
             .withWatermark("shown", "1 minute"))
    click = (clicks.read(spark).select(F.col("imp_id").alias("click_of"), "cents",
                                       F.col("ts").alias("clicked"))
             .withWatermark("clicked", "1 minute"))
    return (shown.join(click, F.expr("imp_id = click_of AND clicked BETWEEN shown AND "
                                     "shown + interval 10 minutes"))
            .select("imp_id", "region", "cents"))


def _plain_write(url: str) -> Any:
    """The baseline's ``foreachBatch`` function: the rows sent to their region's hash by one
    ``mapInArrow`` job, Arrow-built HSETs (SQE's staging task, aimed at the final hashes)."""
    task = stage_task(f"the baseline's {STATE}", RedisEndpoint(url))

    def write(rows: DataFrame, batch_id: int) -> None:
        sent = rows.select(F.col("region").alias("_stage"), F.col("imp_id").alias("_rf"),
                           F.col("cents").cast("string").cast("binary").alias("_rv"))
        task_counts(sent.mapInArrow(task, "stage string, written long"), "stage")

    return write


def run_variant(variant: str, spark: SparkSession, topics: tuple[str, str],
                conf: dict[str, Any], url: str, work: Path, tag: str) -> float:
    """One run of ``variant`` over ``topics``; its median cycle in seconds."""
    impressions, clicks = _hops(tag, topics, conf, work, variant != "spark")
    rows = _joined(spark, impressions, clicks)
    if variant == "sink":
        writer = impressions.write_stream(rows, also=[clicks]).outputMode("append")
    else:
        function = (_plain_write(url) if variant == "spark" else impressions.exactly_once(
            lambda batch_rows, batch: batch.write(STATE, batch_rows), also=[clicks]))
        writer = (rows.writeStream.queryName(tag).outputMode("append")
                  .option("checkpointLocation", str(work / tag)).foreachBatch(function))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return cycle(progress_starts(query))


def _shown(i: int) -> datetime:
    return START + timedelta(seconds=2 * i)


def _cents(i: int) -> int:
    return 10 * (i % 7 + 1)


def _records(count: int) -> tuple[list[tuple[bytes, bytes, int]], list[tuple[bytes, bytes, int]]]:
    """``count`` impressions and as many clicks, keyed as an upstream hop writes them (pid 7
    and 8, one source partition per destination partition)."""
    impressions, clicks = [], []
    for i in range(count):
        p, offset = i % PARTITIONS, i // PARTITIONS
        impressions.append((StreamMetadata(7, p, offset).to_bytes(), json.dumps(
            {"imp_id": f"i{i}", "region": REGIONS[i % 3], "ts": _shown(i).isoformat()}).encode(),
            p))
        clicked = _shown(i) + timedelta(seconds=i % 5 + 1)
        clicks.append((StreamMetadata(8, p, offset).to_bytes(), json.dumps(
            {"imp_id": f"i{i}" if i % 4 else f"x{i}", "cents": _cents(i),
             "ts": clicked.isoformat()}).encode(), p))
    return impressions, clicks


def expected(count: int) -> dict[str, dict[str, str]]:
    """The joined rows of :func:`_records`, as the region hashes hold them."""
    want: dict[str, dict[str, str]] = {r: {} for r in REGIONS}
    for i in range(count):
        if i % 4:
            want[REGIONS[i % 3]][f"i{i}"] = str(_cents(i))
    return want


def _check(url: str, want: dict[str, dict[str, str]], variant: str) -> None:
    """Every expected joined row once in its region's hash, and nothing else there."""
    with redis_client(url) as client:
        for region, rows in want.items():
            got = {k.decode(): v.decode() for k, v in client.hgetall(region).items()}
            if got != rows:
                wrong = sum(1 for k in rows.keys() & got.keys() if rows[k] != got[k])
                raise BenchError(f"{variant}: hash {region} holds {len(got):,} fields for "
                                 f"{len(rows):,} joined rows ({len(rows.keys() - got.keys()):,} "
                                 f"missing, {len(got.keys() - rows.keys()):,} extra, {wrong:,} "
                                 "with other cents)")


def main(argv: list[str] | None = None) -> int:
    a = cycle_args(__doc__, argv, records=1000, batches=8, repeat=2)
    total = a.records * (a.batches + 1)
    want = expected(total)

    def body(stack: ExitStack, work: Path) -> dict[str, list[float]]:
        brokers, url = kafka_and_redis(stack, work, a.brokers, a.redis)
        conf = {**conf_pairs(brokers, url), "jw.sqe.spout.kafka.startingOffsets": "earliest",
                "jw.sqe.spout.kafka.maxRecordsPerBatch": str(a.records)}
        topics = (create_topic(brokers, "bench-join-impressions"),
                  create_topic(brokers, "bench-join-clicks"))
        for topic, records in zip(topics, _records(total), strict=True):
            fill(brokers, topic, records)
        spark = local_spark(stack)
        return interleaved(VARIANTS, a.repeat, url,
                           lambda v, tag: run_variant(v, spark, topics, conf, url, work, tag),
                           lambda v: _check(url, want, v))

    cycles = with_services(body, "join-cost-")
    if cycles is None:
        return 1
    report_cycles(cycles, "spark", 2 * a.records, a,
                  f"the join in batches of {a.records:,} records of each topic",
                  {"joined": sum(len(rows) for rows in want.values())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
