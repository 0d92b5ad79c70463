"""The README's chain as two flows of a Spark Declarative Pipeline, each an SQE hop whose
states are the ``sqe-hop`` sink: enrich (``events`` -> the Kafka topic ``enriched``, keyed by
StreamMetadata) and load (``enriched``, replays dropped -> two Redis hashes, and with
``sqe.chain.postgres_table`` a Postgres table too).  Every event reaches Redis once, through a
kill of the pipeline at any point and its next run.  ``sqe.chain.flows`` (``enrich,load``)
names the flows this pipeline runs: each hop may be a pipeline of its own."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sqe

spark = SparkSession.active()


def setting(key: str, default: str | None = None) -> str:
    return spark.conf.get(f"sqe.chain.{key}", default)


CONFIG = [setting("config")]
FLOWS = setting("flows", "enrich,load").split(",")
POSTGRES_TABLE = setting("postgres_table", "")
OPTIONS = {k.removeprefix("spark."): v for k, v in spark.conf.getAll.items()
           if k.startswith("spark.jw.sqe.")}


def redis_hash(name: str, fields: list[str]) -> sqe.InsertInto:  # key, field, value
    return sqe.InsertInto(objectName=name, stateName="REDIS", fields=fields, options={
        "jw.sqe.state.redis.datatype": "HASH", "jw.sqe.state.redis.keyname.fields": fields[:1],
        "jw.sqe.state.redis.fieldname.fields": fields[1:2]})


if "enrich" in FLOWS:
    enrich = sqe.Hop(
        "enrich.events", topic=setting("events"), config=CONFIG, deserializer="json",
        conf={"jw.sqe.spout.kafka.startingOffsets": "earliest", **OPTIONS,
              "jw.sqe.spout.fields": {"event_id": "string", "user": "string", "region": "string",
                                      "amount": "bigint"}},
        into=[sqe.InsertInto(objectName=setting("enriched"), stateName="KAFKA",
                             fields=["event_id", "user", "region", "amount", "amount_cents"],
                             options={"jw.sqe.state.kafka.keytype": "StreamMetadata",
                                      "jw.sqe.state.kafka.partitionClass":
                                          "SourcePartitionPartitioner"})])
    # The transform, and the sink's frame made of it, are built here, outside the flow function:
    # SDP allows no analysis inside one, and the sink's frame is planned from the rows' schema.
    events = enrich.sink_frame(enrich.read(spark).where("event_id IS NOT NULL")
                               .withColumn("region", F.upper("region"))
                               .withColumn("amount_cents", F.col("amount") * 100))
    dp.create_sink("enriched_topic", format="sqe-hop", options=enrich.sink_options())

    @dp.append_flow(target="enriched_topic")
    def enrich_events() -> DataFrame:
        return events


if "load" in FLOWS:
    load = sqe.Hop(
        "load.enriched", topic=setting("enriched"), config=CONFIG, deserializer="json",
        conf={"jw.sqe.spout.kafka.startingOffsets": "earliest", **OPTIONS,
              "jw.sqe.spout.kafka.filterReplays": True,
              "jw.sqe.spout.fields": {"event_id": "string", "region": "string",
                                      "amount_cents": "bigint"}},
        into=[redis_hash("events_by_region", ["region", "event_id", "amount_cents"]),
              redis_hash("load_log", ["log", "position", "event_id"]),
              *([sqe.InsertInto(objectName=POSTGRES_TABLE, stateName="POSTGRES",
                                fields=["event_id", "region", "amount_cents", "position"])]
                if POSTGRES_TABLE else [])])
    enriched = load.sink_frame(load.read(spark).withColumn("log", F.lit("load_log"))
                               .withColumn("position", F.concat_ws(":", "_partition", "_offset")))
    dp.create_sink("redis_states", format="sqe-hop", options=load.sink_options())

    @dp.append_flow(target="redis_states")
    def load_enriched() -> DataFrame:
        return enriched
