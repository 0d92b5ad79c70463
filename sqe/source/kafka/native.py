"""Spark's own Kafka connector as an SQE source (``jw.sqe.spout.kafka.format=native``).

For users who run ``spark-submit --packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``.  The
connector's columns are renamed to the ``sqe-kafka`` schema and the key is
decoded with Spark built-ins, so everything downstream (deserializers,
queries, states, the DataFrame-level replay filter) is the same.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.config.views import StreamSettings
from sqe.errors import SourceError
from sqe.source.replay import judgeable_column
from sqe.wire.columns import SCHEMA

__all__ = ["decode_key_columns", "native_stream"]


def _signed(hex_digits: Column, bits: int) -> Column:
    """A big-endian two's-complement integer from its hex digits (conv(..., -10) is signed 64)."""
    if bits == 64:
        return F.conv(hex_digits, 16, -10).cast("long")
    unsigned = F.conv(hex_digits, 16, 10).cast("long")
    return F.when(unsigned >= 2 ** (bits - 1), unsigned - 2 ** bits).otherwise(unsigned)


def decode_key_columns(frame: DataFrame, key: str = "_key") -> DataFrame:
    """``frame`` with ``_pid``, ``_source_partition``, ``_source_offset`` decoded from ``key``.

    Built-ins only; the columns are NULL where the key cannot be judged: NULL, not 20
    bytes, or a negative source partition or offset (the same rule as
    :func:`sqe.source.replay.judgeable`).
    """
    k = F.col(key)
    pid = _signed(F.hex(F.substring(k, 1, 8)), 64)
    part = _signed(F.hex(F.substring(k, 9, 4)), 32).cast("int")
    off = _signed(F.hex(F.substring(k, 13, 8)), 64)
    valid = judgeable_column(k.isNotNull() & (F.length(k) == 20), part, off)
    return (frame.withColumn("_pid", F.when(valid, pid))
                 .withColumn("_source_partition", F.when(valid, part))
                 .withColumn("_source_offset", F.when(valid, off)))


def _native_columns(raw: DataFrame) -> DataFrame:
    renamed = raw.select(
        F.col("key").alias("_key"), F.col("value").alias("_value"),
        F.col("topic").alias("_topic"), F.col("partition").cast("int").alias("_partition"),
        F.col("offset").alias("_offset"), F.col("timestamp").alias("_timestamp"),
    )
    decoded = decode_key_columns(renamed)
    return decoded.select(*[F.col(f.name) if f.name in decoded.columns
                            else F.lit(None).cast(f.dataType).alias(f.name)
                            for f in SCHEMA.fields])


def native_stream(spark: Any, topic: str, stream: StreamSettings) -> DataFrame:
    """A streaming DataFrame of ``topic`` read by Spark's Kafka connector, in the ``sqe-kafka``
    schema."""
    starting = stream.starting_offsets
    if starting not in ("earliest", "latest"):  # the connector's JSON names the topic
        starting = json.dumps({topic: json.loads(starting)})
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", stream.bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", starting)
              .option("failOnDataLoss", "true"))
    if stream.max_records is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(stream.max_records))
    for key, value in stream.consumer_properties.items():
        reader = reader.option(f"kafka.{key}", value)
    try:
        raw = reader.load()
    except Exception as exc:  # Py4J / analysis error: the connector is missing
        if "kafka" in str(exc).lower() and ("not found" in str(exc).lower()
                                            or "data source" in str(exc).lower()):
            raise SourceError(
                "jw.sqe.spout.kafka.format=native needs Spark's Kafka connector on the classpath: "
                "run with spark-submit --packages "
                "org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version>, "
                "or use format=python (the default)") from None
        raise
    return _native_columns(raw)
