"""A stream-stream join in a hop, exactly once: each ad impression with the click it got.

Two upstream hops write the topics `impressions` (`imp_id`, `region`, `ts`) and `clicks`
(`imp_id`, `cents`, `ts`), each record keyed by the record it came from.  This hop reads both,
each with its own consumer (`clicked.impressions`, `clicked.clicks`) whose replay filter drops
the records an upstream batch run again wrote twice, and joins them in Spark: an impression with
a click on it within 10 minutes, each side with a watermark of 1 minute, so that Spark's state
store forgets what can no longer match.  One query, one checkpoint, one batch id for both.

Each joined row goes to a Redis hash (`clicked_by_region`: region -> impression -> cents) and
to a Kafka topic (`--clicked`), whose records SQE keys by batch, so that a next hop drops the
copies a batch run again after a failure writes.  The impressions hop's commit carries the
states' rows, its marks and the batch id; the clicks hop commits its marks after it.

    python examples/ad_clicks.py --config conf/local.yaml

``--once`` reads what is there and stops; ``--conf K=V`` sets an option over the config files;
``--remote sc://HOST:PORT`` runs the hop over Spark Connect.  The page "SQE from PySpark" in
the docs explains the rules a stateful hop follows.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark_chain import SOURCE_PARTITIONS, hop_main, named, rebuilt, start_hop  # as the chain's hops do

import sqe


def clicked(spark: SparkSession, a: argparse.Namespace) -> sqe.Hop:
    def hop(stream: str, topic: str, fields: dict[str, str],
            into: list[sqe.InsertInto]) -> sqe.Hop:
        return sqe.Hop(f"clicked.{stream}", topic=topic, checkpoint=f"{a.checkpoint}/clicked",
                       config=a.config, deserializer="json", into=into,
                       conf={"jw.sqe.spout.kafka.filterReplays": True,
                             "jw.sqe.spout.fields": fields,
                             "jw.sqe.spout.kafka.startingOffsets": "earliest", **a.conf})

    impressions = hop("impressions", a.impressions,
                      {"imp_id": "string", "region": "string", "ts": "timestamp"},
                      [sqe.InsertInto(objectName="clicked_by_region", stateName="REDIS",
                                      fields=["region", "imp_id", "cents"],
                                      options={"jw.sqe.state.redis.datatype": "HASH",
                                               "jw.sqe.state.redis.keyname.fields": ["region"],
                                               "jw.sqe.state.redis.fieldname.fields":
                                                   ["imp_id"]}),
                       sqe.InsertInto(objectName=a.clicked, stateName="KAFKA",
                                      fields=["imp_id", "region", "cents", "delay_s"],
                                      options=SOURCE_PARTITIONS)])
    clicks = hop("clicks", a.clicks, {"imp_id": "string", "cents": "bigint", "ts": "timestamp"},
                 [])
    if rebuilt(a, spark, impressions, clicks):
        return impressions
    shown = (impressions.read(spark).select("imp_id", "region", F.col("ts").alias("shown"))
             .withWatermark("shown", "1 minute"))
    click = (clicks.read(spark).select(F.col("imp_id").alias("click_of"), "cents",
                                       F.col("ts").alias("clicked"))
             .withWatermark("clicked", "1 minute"))
    joined = (shown.join(click, F.expr("imp_id = click_of AND clicked BETWEEN shown AND "
                                       "shown + interval 10 minutes"))
              .select("imp_id", "region", "cents",
                      (F.unix_timestamp("clicked") - F.unix_timestamp("shown")).alias("delay_s")))

    def write(rows: DataFrame, batch: sqe.HopBatch) -> None:
        batch.write("clicked_by_region", rows)
        batch.write(a.clicked, rows)

    return start_hop(impressions, joined, write, a, also=[clicks])


def main(argv: list[str] | None = None) -> int:
    options = named(impressions="impressions", clicks="clicks", clicked="clicked",
                    checkpoint="checkpoints/ad-clicks")
    return hop_main(__doc__, "ad-clicks", clicked, options, argv)


if __name__ == "__main__":
    sys.exit(main())
