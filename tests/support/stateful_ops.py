"""Spark's stateful operators in a hop, as the stateful-hop tests run them: in the test's own
session, and (``python -m tests.support.stateful_ops --remote sc://...``) as a client of a
Spark Connect server, where the query and its ``foreachBatch`` run on the server (what it
defines goes there by value: run as a script, it is ``__main__``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

import sqe
from sqe.config.settings import parse_conf_pairs

#: The fields of the tests' events.
FIELDS = {"event_id": "string", "region": "string", "amount": "bigint", "ts": "timestamp"}
#: Where transformWithStateInPandas keeps its state: RocksDB, set before the query starts.
STATE_PROVIDER = ("spark.sql.streaming.stateStore.providerClass",
                  "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")


def deduplicated(rows: DataFrame) -> DataFrame:
    """Each event once (``window``: its id, ``total``: its amount), though two producers sent
    it: ``dropDuplicatesWithinWatermark`` (append mode)."""
    return (rows.withWatermark("ts", "30 seconds").dropDuplicatesWithinWatermark(["event_id"])
            .select(F.col("event_id").alias("window"), "region", F.col("amount").alias("total")))


class RegionTotals(StatefulProcessor):
    """transformWithStateInPandas: each region's running total, in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "total long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        total = self.total.get()[0] if self.total.exists() else 0
        for frame in rows:
            total += int(frame["amount"].sum())
        self.total.update((total,))
        yield pd.DataFrame({"region": [key[0]], "total": [total]})

    def close(self) -> None:
        pass


def region_totals(rows: DataFrame) -> DataFrame:
    """Each region's running total by :class:`RegionTotals` (update mode)."""
    return rows.groupBy("region").transformWithStateInPandas(
        RegionTotals(), "region string, total long", "Update", "None")


def redis_hash(tag_fields: list[str], field: str) -> dict[str, Any]:
    """A Redis HASH state's options: its key by ``tag_fields``, its field by ``field``."""
    return {"jw.sqe.state.redis.datatype": "HASH", "jw.sqe.state.redis.keyname.fields": tag_fields,
            "jw.sqe.state.redis.fieldname.fields": [field]}


def run(spark: SparkSession, operator: str, topic: str, out: str, checkpoint: str, tag: str,
        conf: dict[str, Any]) -> sqe.Hop:
    """``operator`` (``dedup``: into a Redis hash and Kafka topic ``out``; ``tws``: into Redis
    totals) over ``topic`` until what is there is read."""
    options = {"jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": FIELDS,
               "jw.sqe.spout.kafka.maxRecordsPerBatch": 150, **conf}
    if operator == "dedup":
        fields = ["tag", "region", "window", "total"]
        into = [sqe.InsertInto(objectName="sums", stateName="REDIS", fields=fields,
                               options=redis_hash(["tag", "region"], "window")),
                sqe.InsertInto(objectName=out, stateName="KAFKA", fields=fields, options={
                    "jw.sqe.state.kafka.keytype": "StreamMetadata",
                    "jw.sqe.state.kafka.partitionClass": "SourcePartitionPartitioner"})]
    else:
        into = [sqe.InsertInto(objectName="totals", stateName="REDIS",
                               fields=["tag", "region", "total"],
                               options={"jw.sqe.state.redis.keyname.fields": ["tag", "region"]})]
    hop = sqe.Hop(f"{operator}.enriched", topic=topic, checkpoint=checkpoint,
                  deserializer="json", conf=options, into=into)
    rows = hop.read(spark)
    frame = (deduplicated(rows) if operator == "dedup" else region_totals(rows)) \
        .withColumn("tag", F.lit(tag))

    def write(batch_rows: DataFrame, batch: sqe.HopBatch) -> None:
        for state in into:
            batch.write(state.objectName, batch_rows)

    (frame.writeStream.outputMode("append" if operator == "dedup" else "update")
     .option("checkpointLocation", hop.checkpoint).trigger(availableNow=True)
     .foreachBatch(hop.exactly_once(write)).start().awaitTermination())
    return hop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("remote", "operator", "topic", "out", "checkpoint", "tag"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--conf", action="append", default=[])
    a = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    try:
        if a.operator == "tws":
            spark.conf.set(*STATE_PROVIDER)
        run(spark, a.operator, a.topic, a.out, a.checkpoint, a.tag, parse_conf_pairs(a.conf))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
