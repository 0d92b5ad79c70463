"""A stateful hop, exactly once: each region's amount per minute, from the README's chain.

It reads the `enriched` topic that the chain's `enrich` hop writes (each record keyed by the
event it came from), drops replays, and keeps per region and per minute of the records' Kafka
timestamps the sum of `amount_cents` and the number of events: a windowed aggregation with a
watermark (a record more than 5 minutes older than the latest is dropped as late), in Spark's
update mode, so that each batch writes the windows it changed.  It writes them to a Redis hash
(`sums_by_minute`: region -> minute -> cents) and to a Kafka topic (`--sums`), whose records
SQE keys by batch so that a next hop drops the copies a batch run again after a failure writes.
Spark's state store keeps the open windows in the checkpoint; SQE's replay filter keeps replays
out of them.

    python examples/pyspark_chain.py enrich --config conf/local.yaml
    python examples/windowed_sums.py --config conf/local.yaml

``--once`` reads what is there and stops; ``--conf K=V`` sets an option over the config files;
``--remote sc://HOST:PORT`` runs the hop over Spark Connect.  The page "SQE from PySpark" in
the docs explains the rules a stateful hop follows.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark_chain import hop_main, named, rebuilt, start_hop  # as the chain's hops do

import sqe


def sums(spark: SparkSession, a: argparse.Namespace) -> sqe.Hop:
    fields = {"event_id": "string", "region": "string", "amount_cents": "bigint"}
    hop = sqe.Hop(
        "sums.enriched", topic=a.enriched, checkpoint=f"{a.checkpoint}/sums", config=a.config,
        deserializer="json",
        conf={"jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": fields,
              "jw.sqe.spout.kafka.startingOffsets": "earliest", **a.conf},
        into=[sqe.InsertInto(objectName="sums_by_minute", stateName="REDIS",
                             fields=["region", "minute", "cents"],
                             options={"jw.sqe.state.redis.datatype": "HASH",
                                      "jw.sqe.state.redis.keyname.fields": ["region"],
                                      "jw.sqe.state.redis.fieldname.fields": ["minute"]}),
              sqe.InsertInto(objectName=a.sums, stateName="KAFKA",
                             fields=["region", "minute", "cents", "events"],
                             options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                      "jw.sqe.state.kafka.partitionClass":
                                          "SourcePartitionPartitioner"})])
    if rebuilt(a, spark, hop):
        return hop
    per_minute = (hop.read(spark)
                  .withWatermark("_timestamp", "5 minutes")
                  .groupBy("region", F.window("_timestamp", "1 minute"))
                  .agg(F.sum("amount_cents").alias("cents"), F.count("*").alias("events"))
                  .select("region", F.date_format("window.start", "yyyy-MM-dd'T'HH:mm")
                          .alias("minute"), "cents", "events"))

    def write(rows: DataFrame, batch: sqe.HopBatch) -> None:
        batch.write("sums_by_minute", rows)
        batch.write(a.sums, rows)

    return start_hop(hop, per_minute, write, a, "update")


def main(argv: list[str] | None = None) -> int:
    options = named(enriched="enriched", sums="sums", checkpoint="checkpoints/windowed-sums")
    return hop_main(__doc__, "windowed-sums", sums, options, argv)


if __name__ == "__main__":
    sys.exit(main())
