"""The README's chain (enrich -> `enriched` -> load) as plain PySpark, exactly once.

Each hop is ordinary Structured Streaming code: a read, a transform that a topology file cannot
express (a join with a static table, a pandas UDF), and a ``foreachBatch`` function.  SQE
changes three lines of it: the read (``hop.read``), the checkpoint (``hop.checkpoint``) and
the ``foreachBatch`` function (``hop.exactly_once``).

    python examples/pyspark_chain.py enrich --config conf/local.yaml
    python examples/pyspark_chain.py load --config conf/local.yaml

``--once`` reads what is there and stops; ``--conf K=V`` sets an option over the config
files, as ``sqe run --conf`` does; ``--remote sc://HOST:PORT`` runs the hop over Spark
Connect; ``--sink`` writes the states with the ``sqe-hop`` sink instead of ``foreachBatch``;
``--rebuild-marks`` gives an HWM store that lost a hop's marks them back and stops.
The page "SQE from PySpark" in the docs explains each line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import pandas as pd
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sqe
from sqe.config.settings import parse_conf_pairs  # `--conf K=V` as `sqe run` reads it

SOURCE_PARTITIONS = {"jw.sqe.state.kafka.keytype": "StreamMetadata",
                     "jw.sqe.state.kafka.partitionClass": "SourcePartitionPartitioner"}


def enrich(spark: SparkSession, a: argparse.Namespace) -> sqe.Hop:
    fields = {"event_id": "string", "user": "string", "region": "string", "amount": "bigint"}
    hop = sqe.Hop("enrich.events", topic=a.events, checkpoint=f"{a.checkpoint}/enrich",
                  config=a.config, deserializer="json",
                  conf={"jw.sqe.spout.fields": fields,
                        "jw.sqe.spout.kafka.startingOffsets": "earliest", **a.conf},
                  into=[sqe.InsertInto(objectName=a.enriched, stateName="KAFKA",
                                       fields=["event_id", "user", "tier", "region", "amount",
                                               "amount_cents"], options=SOURCE_PARTITIONS)])
    tiers = spark.createDataFrame([(f"u{i}", "gold" if i % 10 == 0 else "basic")
                                   for i in range(1000)], "user string, tier string")

    @F.pandas_udf("bigint")
    def cents(amount: pd.Series) -> pd.Series:
        return amount * 100

    enriched = (hop.read(spark).where("event_id IS NOT NULL")
                .join(F.broadcast(tiers), "user", "left")        # a static table
                .withColumn("region", F.upper("region"))
                .withColumn("amount_cents", cents("amount")))      # a pandas UDF
    return start_hop(hop, enriched, lambda rows, batch: batch.write(a.enriched, rows), a)


def load(spark: SparkSession, a: argparse.Namespace) -> sqe.Hop:
    fields = {"event_id": "string", "region": "string", "amount_cents": "bigint"}

    def redis_hash(name: str, columns: list[str]) -> sqe.InsertInto:  # key, field, value
        return sqe.InsertInto(objectName=name, stateName="REDIS", fields=columns, options={
            "jw.sqe.state.redis.datatype": "HASH",
            "jw.sqe.state.redis.keyname.fields": columns[:1],
            "jw.sqe.state.redis.fieldname.fields": columns[1:2]})

    hop = sqe.Hop("load.enriched", topic=a.enriched, checkpoint=f"{a.checkpoint}/load",
                  config=a.config, deserializer="json",
                  conf={"jw.sqe.spout.kafka.filterReplays": True, "jw.sqe.spout.fields": fields,
                        "jw.sqe.spout.kafka.startingOffsets": "earliest", **a.conf},
                  into=[redis_hash("events_by_region", ["region", "event_id", "amount_cents"]),
                        redis_hash("load_log", ["log", "position", "event_id"]),
                        sqe.InsertInto(objectName="loaded_events", stateName="POSTGRES",
                                       fields=["event_id", "region", "amount_cents", "position"])])
    if rebuilt(a, spark, hop):
        return hop
    rows = (hop.read(spark).withColumn("log", F.lit("load_log"))
            .withColumn("position", F.concat_ws(":", "_partition", "_offset")))

    def write(batch_rows: DataFrame, batch: sqe.HopBatch) -> None:
        for name in ("events_by_region", "load_log", "loaded_events"):
            batch.write(name, batch_rows)

    return start_hop(hop, rows, write, a)


def rebuilt(a: argparse.Namespace, spark: SparkSession, *hops: sqe.Hop) -> bool:
    """With ``--rebuild-marks``, give the hops' HWM store the marks it lost (a refused run
    names this way back), read from their topics, and say so; whether it did."""
    for hop in hops if a.rebuild_marks else ():
        print(hop.rebuild_marks(spark))
    return bool(a.rebuild_marks)


def start_hop(hop: sqe.Hop, frame: DataFrame, write: Callable[[DataFrame, sqe.HopBatch], None],
              a: argparse.Namespace, mode: str = "append", also: list[sqe.Hop] | None = None
              ) -> sqe.Hop:
    """Run ``frame``'s query (in output ``mode``; ``also``: the other hops it reads, a join),
    each batch written by ``write`` exactly once, until stopped (with ``--once``: until what
    is there is read), and print its reports; the hop, whose reports they are."""
    if a.sink:  # Spark's own sink protocol: every state takes every row, its fields
        writer = hop.write_stream(frame, also=also or []).outputMode(mode)
    else:
        writer = (frame.writeStream.queryName(hop.consumer).outputMode(mode)
                  .option("checkpointLocation", hop.checkpoint)
                  .foreachBatch(hop.exactly_once(write, also=also or [])))
    hop.run(writer.trigger(availableNow=True) if a.once else writer)  # a failure: SQE's error
    for report in hop.reports:
        print(report.line())
    return hop


def named(**defaults: str) -> Callable[[argparse.ArgumentParser], None]:
    """The options ``--<name>`` (a topic, the checkpoint) with their defaults."""
    def options(parser: argparse.ArgumentParser) -> None:
        for name, default in defaults.items():
            parser.add_argument(f"--{name}", default=default)

    return options


def hop_main(doc: str, name: str, run: Callable[[SparkSession, argparse.Namespace], object],
             options: Callable[[argparse.ArgumentParser], None], argv: list[str] | None) -> int:
    """Parse a hop's command line (the common options and its own), make the Spark session
    (local, or ``--remote``), run ``run(spark, args)``, and say a refusal in one sentence."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    options(parser)
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--sink", action="store_true",
                        help="write with the sqe-hop sink instead of foreachBatch")
    parser.add_argument("--rebuild-marks", action="store_true",
                        help="read the marks an HWM store lost back from the topic, and stop")
    parser.add_argument("--remote", help="a Spark Connect server, e.g. sc://localhost:15002")
    a = parser.parse_args(argv)
    a.conf = parse_conf_pairs(a.conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.remote(a.remote) if a.remote
               else SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"))
    spark = (builder.appName(name.format(**vars(a)))
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        run(spark, a)
    except sqe.SqeError as exc:  # a refusal before the query starts: one sentence
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (PySparkException, Py4JJavaError) as exc:  # the query failed: why, in one sentence
        print(f"error: {sqe.Hop.explain(exc)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("hop", choices=["enrich", "load"])
        parser.add_argument("--events", default="events")
        parser.add_argument("--enriched", default="enriched")
        parser.add_argument("--checkpoint", default="checkpoints/pyspark-chain")

    return hop_main(__doc__, "pyspark-chain {hop}",
                    lambda spark, a: (enrich if a.hop == "enrich" else load)(spark, a),
                    options, argv)


if __name__ == "__main__":
    sys.exit(main())
