"""The streaming DataFrame of a stream: its source (with the counters Spark observes, when
asked), and, when the stream can be (:mod:`sqe.engine.batch.one_pass`), all of its batch planned
once over it; for a stream that learns its JSON field types, with the types its checkpoint
learned (:func:`with_learned_types`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource

from sqe.engine.batch.learned_types import json_wanted, load_learned
from sqe.engine.batch.one_pass import OnePassPlan, plan_one_pass, why_not_one_pass
from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.source.fixed import FixedSource
from sqe.source.kafka import KafkaSource
from sqe.source.kafka.native import native_stream
from sqe.wire.columns import TALLY

__all__ = ["learns_types", "own_source", "planned_once", "source_frame", "with_learned_types"]

log = logging.getLogger("sqe")


_REGISTERING = threading.Lock()


@contextmanager
def own_source(spark: SparkSession, source: type[DataSource]) -> Iterator[None]:
    """Register Python data source ``source`` anew for the frame loaded inside, so that frame
    has a registration of its own.  Spark's functions of a Python data source share the
    registration's map of environment variables, and its streaming source runner puts entries
    into that map when a stream starts (``PythonStreamingSourceRunner.init``): two streams of
    one registration race when one starts while another's job is being serialized, and the
    job's task fails to read its closure (``java.io.OptionalDataException``)."""
    with _REGISTERING:
        spark.dataSource.register(source)
        yield


def source_frame(spark: SparkSession, p: StreamPipeline) -> DataFrame:
    """The stream's source rows; for the ``sqe-kafka`` source with ``observedMetrics``, with
    its counters observed as ``sqe.<stream>`` in the streaming query's progress (Spark then
    counts every row again: SQE's batch report has the same counts)."""
    if p.fixed is not None:
        with own_source(spark, FixedSource):
            frame = spark.readStream.format(FixedSource.name()).options(**p.fixed).load()
    elif p.native:
        return native_stream(spark, p.stream.objectName, p.settings)
    else:
        assert p.source is not None
        with own_source(spark, KafkaSource):
            frame = spark.readStream.format(KafkaSource.name()).options(
                **p.source.to_options()).load()
    if not p.settings.observed_metrics:
        return frame
    return frame.observe(
        f"sqe.{p.stream.streamName}",
        F.count("_offset").alias("records_passed"),
        F.coalesce(F.sum("_replays_dropped"), F.lit(0)).alias("replays_dropped"),
        F.count_if(F.col("_offset").isNotNull() & F.col("_pid").isNull()).alias(
            "unparseable_keys"),
        *[F.coalesce(F.sum(c), F.lit(0)).alias(c[1:]) for c in TALLY if c != "_replays_dropped"],
    )


def planned_once(p: StreamPipeline, frame: DataFrame) -> OnePassPlan | None:
    """Stream ``p`` planned once over its source ``frame``, or None (why, logged at debug
    level: ``sqe run --log-level debug``)."""
    store = p.stores.hwm_store() if why_not_one_pass(p) is None else None
    try:
        plan = plan_one_pass(p, frame, store)
    finally:
        if store is not None:
            store.client.close()
    if isinstance(plan, str):
        log.debug(f"{p.consumer}: each batch is planned on its own: {plan}")
        return None
    log.debug(f"{p.consumer}: planned once; each batch is one Spark job")
    return plan


def learns_types(p: StreamPipeline) -> bool:
    """Whether stream ``p`` learns its JSON field types: it declares none, and with them it
    could be planned once (:func:`~sqe.engine.batch.one_pass.why_not_one_pass`)."""
    wanted = json_wanted(p.wanted_fields)
    if not p.learns or not wanted:
        return False
    return why_not_one_pass(p.with_learned(dict.fromkeys(wanted, "string"))) is None


def with_learned_types(p: StreamPipeline, checkpoint: StreamCheckpoint) -> StreamPipeline:
    """Stream ``p`` (one that :func:`learns_types`) with the JSON field types its
    ``checkpoint`` learned, if any."""
    types = load_learned(checkpoint, json_wanted(p.wanted_fields))
    return p.with_learned(types) if types is not None else p
