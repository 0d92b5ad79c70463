"""Running a planned topology on Spark Structured Streaming.

One streaming query per ``CreateStream``.  Every ``Query`` that reads from
that stream -- directly, or through intermediate ``insertInto`` streams
without a ``stateName`` -- runs inside the query's ``foreachBatch`` on the
cached micro-batch, in file order.  Per micro-batch ``K`` of a stream:

1. with ``filterReplays``: read the committed batch id ``C`` of this consumer
   (``<topology>.<stream>``) from the HWM store; ``K == C`` was committed
   already (Spark re-ran it) and is skipped; ``K < C`` is a stale writer and
   fails loudly;
2. drop replays (already done in the source's ``read()``; for the native
   connector by :func:`sqe.source.replay.filter_replays_frame`);
3. stamp each record with its StreamMetadata (this stream's pid, the source
   partition and offset), deserialize, run the queries, write the states: a
   Kafka state re-stamps its keys (its retries are replays for the next hop);
   a Redis state in the HWM store's database is staged; a Postgres state
   commits its rows with ``K`` in one SQL transaction (skipped when the table
   holds ``K`` already); any other Redis state is written (idempotently);
4. commit the new HWMs with batch id ``K``, applying the staged Redis rows in
   the same atomic step.

Counters of every batch (records read, replays dropped, unparseable keys
passed through, values that are not JSON, rows written per state) are logged
on one line with the batch's duration and rate, appended to the progress file
``<checkpoint>/sqe-progress.jsonl`` (:mod:`sqe.run.progress`, read by ``sqe report``)
and, for the ``sqe-kafka`` source, reported in the streaming query progress as
observed metrics named ``sqe.<stream>``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sqe.config.client_properties import consumer_properties
from sqe.config.kafka_client import cluster_metadata, consumer_conf, new_consumer
from sqe.config.plan import TopologyPlan
from sqe.config.redis_endpoint import hwm_endpoint, persistence_warning
from sqe.config.settings import Settings
from sqe.errors import RunError, SourceError, SqeError, StateError, TopologyError
from sqe.faults import fault_point
from sqe.lang.compiler import CARRIED, CompiledQuery, compile_parts
from sqe.lang.expressions import fields_of, to_raw
from sqe.lang.topology import CreateStream, Query
from sqe.run.progress import ProgressLog, progress_path
from sqe.source.deserializers import deserialize
from sqe.source.fixed import FixedSource, fixed_options
from sqe.source.kafka import KafkaSource, SourceConfig, data_rows
from sqe.source.replay import filter_replays_frame
from sqe.source.rows import CHUNK_INDEX_BITS, TALLY, Tally
from sqe.wire.keys import kafka_secondary_id, pid_for

__all__ = ["BatchReport", "RunError", "StreamPipeline", "build_pipelines", "run_topology"]

log = logging.getLogger("sqe")

Mode = Literal["once", "runtime", "forever"]


@dataclass
class BatchReport:
    """What one micro-batch of one stream did."""

    stream: str
    batch_id: int
    records_read: int = 0
    replays_dropped: int = 0
    unparseable_keys: int = 0
    unparseable_values: int = 0
    written: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    filtering: bool = False
    already_written: list[str] = field(default_factory=list)
    source: Tally = field(default_factory=Tally)
    warnings: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.time)  # epoch seconds
    duration_s: float = 0.0  # set when the batch is done

    def rate(self) -> float | None:
        """Records read per second of this batch (None before it is done)."""
        return self.records_read / self.duration_s if self.duration_s > 0 else None

    def line(self) -> str:
        """The log line of this batch."""
        if self.skipped:
            return (f"{self.stream} batch {self.batch_id}: already committed to the HWM store, "
                    "skipped")
        outs = ", ".join(f"{k} held this batch already" if k in self.already_written
                         else f"{n} to {k}" for k, n in self.written.items()) or "no state written"
        replays = (f"{self.replays_dropped} replays dropped, {self.unparseable_keys} records "
                   "with unparseable keys passed through, " if self.filtering else "")
        rate = self.rate()
        timing = (f" in {self.duration_s:.2f} s ({rate:,.{0 if rate >= 10 else 1}f} records/s)"
                  if rate is not None else "")
        return (f"{self.stream} batch {self.batch_id}: {self.records_read} records read, "
                f"{replays}{self.unparseable_values} values not JSON{self._source_text()}; "
                f"wrote {outs}{timing}")

    def _source_text(self) -> str:
        t = self.source
        parts = []
        if t.chunks_read:
            parts.append(f"{t.chunks_read} chunks read ({t.chunks_skipped_bloom} skipped by the "
                         f"Bloom filter, {t.chunks_skipped_hwm} by the HWM, "
                         f"{t.chunks_false_positive} false positives), {t.messages_decoded} "
                         f"messages decoded, {t.bytes_not_decoded} of "
                         f"{t.bytes_decoded + t.bytes_not_decoded} bytes not decoded")
        if t.messages_filtered:
            parts.append(f"{t.messages_filtered} messages post-filtered out")
        if t.dead_letters:
            parts.append(f"{t.dead_letters} corrupt chunks sent to the dead-letter topic")
        parts += [f"{n} {name.replace('_', ' ')} (NULL)" for name, n in self.warnings.items()
                  if n]
        return "".join(f", {p}" for p in parts)


@dataclass(frozen=True)
class StreamPipeline:
    """A CreateStream and everything that runs in its foreachBatch."""

    stream: CreateStream
    settings: Settings
    queries: tuple[tuple[str, Query, Settings], ...]
    source: SourceConfig | None  # None: a FIXED stream
    pid: int
    consumer: str
    native: bool
    fixed: dict[str, str] | None = None  # the sqe-fixed reader options of a FIXED stream

    @property
    def wanted_fields(self) -> list[str]:
        """Field names the queries refer to (a JSON stream makes missing ones NULL)."""
        names: list[str] = []
        for _, q, _ in self.queries:
            if q.from_.objectName != self.stream.streamName:
                continue
            exprs = [*q.select.expressions, *([q.where] if q.where is not None else [])]
            for e in exprs:
                names += sorted(fields_of(e))
        return names


def _queries_of(plan: TopologyPlan, stream: CreateStream) -> list[tuple[str, Query, Settings]]:
    t = plan.topology
    reachable = {stream.streamName}
    found = []
    for command in t.commands:
        if isinstance(command, Query) and command.from_.objectName in reachable:
            reachable.add(command.insertInto.objectName)
            found.append((f"{t.path}: {t.label(command)}", command, plan.state_settings(command)))
    return found


def _cluster_id(brokers: str, topic: str, properties: dict[str, str]) -> str | None:
    client = new_consumer(consumer_conf(brokers, "sqe-metadata", properties, quiet=True),
                          "metadata")
    try:
        return cluster_metadata(client, topic, brokers, SourceError, "Kafka source").cluster_id
    finally:
        client.close()


def build_pipelines(plan: TopologyPlan, name: str) -> list[StreamPipeline]:
    """The pipelines of a topology named ``name`` (the name in every pid)."""
    pipelines = []
    for stream in plan.topology.streams:
        s = plan.streams[stream.streamName]
        consumer = f"{name}.{stream.streamName}"
        queries = tuple(_queries_of(plan, stream))
        if stream.spoutName == "FIXED":  # SQE's pid of a fixed stream: hash64(topology + stream)
            fixed = fixed_options(stream.objectName, s["jw.sqe.spout.fixed.fields"],
                                  s["jw.sqe.spout.fixed.values"])
            pid = s["jw.sqe.pid"] if s["jw.sqe.pid"] is not None else pid_for(
                name, stream.streamName, "")
            pipelines.append(StreamPipeline(stream, s, queries, None, int(pid), consumer, False,
                                            fixed))
            continue
        if stream.spoutName != "KAFKA":
            raise TopologyError(f"{plan.topology.path}: {plan.topology.label(stream)}: sqe run "
                                f"reads KAFKA and FIXED streams; spoutName {stream.spoutName} "
                                "is for sqe validate only")
        brokers = ",".join(s["jw.sqe.spout.kafka.brokers"])
        kafka_extra = consumer_properties(s)
        hwm = hwm_endpoint(s)
        native = s["jw.sqe.spout.kafka.format"] == "native"
        source = SourceConfig(
            topic=stream.objectName, brokers=brokers,
            starting=s["jw.sqe.spout.kafka.startingOffsets"],
            max_records=s["jw.sqe.spout.kafka.maxRecordsPerBatch"],
            read_timeout=s["jw.sqe.spout.kafka.readTimeoutSeconds"],
            filter_replays=bool(s["jw.sqe.spout.kafka.filterReplays"]) and not native,
            hwm_url=hwm.url, hwm_username=hwm.username, hwm_password=hwm.password,
            hwm_ca_file=hwm.ca_file, hwm_cert_file=hwm.cert_file, hwm_key_file=hwm.key_file,
            hwm_consumer=consumer,
            hwm_ttl=s["jw.sqe.spout.kafka.filterReplays.metadata.ttl"],
            emit_tally=True, kafka=kafka_extra,
            chunks=bool(s["jw.sqe.spout.kafka.chunks"]),
            filter_values=tuple(s["jw.sqe.spout.kafka.filterValues"] or ()),
            match_unfiltered=bool(s["jw.sqe.spout.kafka.matchUnfiltered"]),
            post_filter=(json.dumps(to_raw(s["jw.sqe.spout.kafka.postFilter"]))
                         if s["jw.sqe.spout.kafka.postFilter"] is not None else None),
            corrupt_policy=s["jw.sqe.spout.kafka.corruptChunkPolicy"],
            dead_letter_topic=s["jw.sqe.spout.kafka.deadLetterTopic"],
        )
        pid = s["jw.sqe.pid"]
        if pid is None:
            secondary = kafka_secondary_id(_cluster_id(brokers, stream.objectName, kafka_extra),
                                           s["jw.sqe.spout.kafka.brokers"], stream.objectName)
            pid = pid_for(name, stream.streamName, secondary)
        pipelines.append(StreamPipeline(stream, s, queries, source, int(pid), consumer, native))
    return pipelines


@dataclass
class _Commit:
    """What the states of one batch hand to its commit: who, which batch, staged rows."""

    consumer: str
    batch_id: int
    store: Any  # state.hwm.HwmStore, or None without filterReplays
    stages: list[Any] = field(default_factory=list)
    already: list[str] = field(default_factory=list)


def _write_redis(frame: DataFrame, cfg: Any, commit: _Commit) -> int:
    import redis

    from state.hwm import Stage
    from state.redis import stage_redis, write_redis

    store = commit.store
    try:
        atomic = store is not None and store.same_database(cfg.endpoint)
        if not atomic:
            return write_redis(frame, cfg)
        key = store.stage_key(commit.batch_id, len(commit.stages))
        store.client.delete(key)  # what a crashed attempt of this batch staged
    except redis.RedisError as exc:
        raise StateError(f"Redis state {cfg.name}: {cfg.endpoint.describe_error(exc)}; the "
                         "batch fails and is written when it is retried") from None
    rows = stage_redis(frame, cfg, store.endpoint, key)
    commit.stages.append(Stage(key, cfg.datatype, cfg.expire_seconds))
    return rows


def _write_state(query: Query, parts: CompiledQuery, settings: Settings, where: str,
                 commit: _Commit) -> int:
    into = query.insertInto
    frame = parts.frame
    if parts.aggregates and into.stateName == "REDIS":
        from state.redis_aggregates import AggregateStateConfig, write_aggregates

        return write_aggregates(frame, AggregateStateConfig.from_settings(
            into.objectName, into.fields, parts.aggregates, settings, into.stateType),
            commit.batch_id)
    if into.stateName == "KAFKA":
        from state.kafka import KafkaStateConfig, write_kafka

        return write_kafka(frame, KafkaStateConfig.from_settings(into.objectName, into.fields,
                                                                 settings))
    if into.stateName == "REDIS":
        from state.redis import RedisStateConfig

        cfg = RedisStateConfig.from_settings(into.objectName, into.fields, settings)
        return _write_redis(frame, cfg, commit)
    if into.stateName == "POSTGRES":
        from state.postgres import PostgresStateConfig, write_postgres

        done = write_postgres(frame, PostgresStateConfig.from_settings(
            into.objectName, into.fields, settings), commit.consumer, commit.batch_id)
        if done.skipped:
            commit.already.append(into.objectName)
        return done.rows
    if into.stateName == "CONSOLE":
        rows = frame.select(*into.fields).collect()
        for row in rows:
            print(f"{into.objectName}: " + ", ".join(f"{k}={v!r}" for k, v in row.asDict().items()),
                  flush=True)
        return len(rows)
    raise TopologyError(f"{where}: stateName {into.stateName} is not supported by sqe run yet")


class BatchProcessor:
    """The ``foreachBatch`` function of one stream (runs on the driver)."""

    def __init__(self, pipeline: StreamPipeline, reports: list[BatchReport],
                 progress: ProgressLog | None = None) -> None:
        self.p = pipeline
        self.reports = reports
        self.progress = progress
        self.failure: BaseException | None = None
        self.filtering = (bool(pipeline.settings["jw.sqe.spout.kafka.filterReplays"])
                          and pipeline.source is not None)

    def _store(self) -> Any:
        from state.hwm import HwmStore

        src = self.p.source
        assert src is not None  # only streams that filter replays have a store
        return HwmStore.from_url(src.hwm_endpoint, self.p.consumer, src.hwm_ttl)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._process(batch, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        import redis

        report = BatchReport(self.p.stream.streamName, batch_id, filtering=self.filtering)
        store = self._store() if self.filtering else None
        try:
            snapshot = None
            if store is not None:
                try:
                    snapshot = store.admit(batch_id)  # a lower batch id raises StaleBatchError
                except redis.RedisError as exc:
                    raise SourceError(f"cannot read the HWM store of {self.p.consumer}: "
                                      f"{store.endpoint.describe_error(exc)}") from None
                if snapshot is None:  # committed already: Spark re-ran a finished batch
                    report.skipped = True
                    self._done(report)
                    return
            self._run(batch, batch_id, store, snapshot, report)
        finally:
            if store is not None:
                store.client.close()
        self._done(report)

    def _run(self, batch: DataFrame, batch_id: int, store: Any, snapshot: Any,
             report: BatchReport) -> None:
        import redis

        frame = batch.persist()
        try:
            if self.p.native and snapshot is not None:
                rows = data_rows(frame)
                before = rows.count()
                filtered = filter_replays_frame(rows, snapshot.hwm).persist()
                report.replays_dropped = before - filtered.count()
                frame.unpersist()
                frame = filtered
            groups = (frame.groupBy("_pid", "_source_partition")
                      .agg(F.count("_offset").alias("n"), F.max("_source_offset").alias("hi"),
                           *[F.sum(c).alias(c) for c in TALLY]).collect())
            updates = {}
            for g in groups:
                counts = Tally.from_row(g)
                report.source.add(counts)
                report.records_read += g["n"] + counts.replays_dropped
                report.replays_dropped += counts.replays_dropped
                if g["_pid"] is None:
                    report.unparseable_keys += g["n"]
                elif g["hi"] is not None:
                    updates[(g["_pid"], g["_source_partition"])] = g["hi"]
            if self.p.native:
                report.records_read += report.replays_dropped
            stamped = data_rows(frame).select(
                "*", F.lit(self.p.pid).cast("long").alias(CARRIED[0]),
                F.col("_partition").alias(CARRIED[1]), carried_offset().alias(CARRIED[2]))
            kind = "json" if self.p.fixed is not None else self.p.stream.deserializer
            des = deserialize(stamped, kind, self.p.wanted_fields)
            report.unparseable_values = des.unparseable_values
            frames = {self.p.stream.streamName: des.frame}
            commit = _Commit(self.p.consumer, batch_id, store)
            for where, query, settings in self.p.queries:
                parts = compile_parts(query, frames[query.from_.objectName], where)
                frames[query.insertInto.objectName] = parts.frame
                for name, count in parts.warning_counts().items():
                    report.warnings[name] = report.warnings.get(name, 0) + count
                if query.insertInto.stateName:
                    report.written[query.insertInto.objectName] = _write_state(
                        query, parts, settings, where, commit)
            report.already_written = commit.already
            fault_point("before-commit")
            if store is not None:
                try:
                    store.commit(batch_id, updates, commit.stages)
                except redis.RedisError as exc:
                    raise StateError(f"cannot commit the HWMs of {self.p.consumer}: "
                                     f"{store.endpoint.describe_error(exc)}; the batch is "
                                     "re-run and its output filtered as replays") from None
        finally:
            frame.unpersist()

    def _done(self, report: BatchReport) -> None:
        report.duration_s = max(0.0, time.time() - report.started)
        self.reports.append(report)
        if self.progress is not None:
            self.progress.append(report)
        log.info(report.line())


def carried_offset() -> Any:
    """The offset a record carries to the next hop: its Kafka offset, or for a message of a
    chunk ``offset << 24 | index in the chunk`` (increasing per partition either way)."""
    return F.when(F.col("_index").isNull(), F.col("_offset")).otherwise(
        F.shiftleft(F.col("_offset"), CHUNK_INDEX_BITS) + F.col("_index"))


def _source_frame(spark: SparkSession, p: StreamPipeline) -> DataFrame:
    if p.fixed is not None:
        frame = spark.readStream.format(FixedSource.name()).options(**p.fixed).load()
    elif p.native:
        from sqe.source.native import native_stream

        return native_stream(spark, p.source)
    else:
        assert p.source is not None
        frame = spark.readStream.format(KafkaSource.name()).options(
            **p.source.to_options()).load()
    return frame.observe(
        f"sqe.{p.stream.streamName}",
        F.count("_offset").alias("records_passed"),
        F.coalesce(F.sum("_replays_dropped"), F.lit(0)).alias("replays_dropped"),
        F.count_if(F.col("_offset").isNotNull() & F.col("_pid").isNull()).alias(
            "unparseable_keys"),
        *[F.coalesce(F.sum(c), F.lit(0)).alias(c[1:]) for c in TALLY if c != "_replays_dropped"],
    )


_PY_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.M)


def describe_failure(exc: BaseException, processors: list[BatchProcessor]) -> str:
    """The cause of a failed query as one sentence, without a JVM or Python trace."""
    for proc in processors:
        if isinstance(proc.failure, SqeError):
            return str(proc.failure)
    text = str(exc)
    ours = [m for m in _PY_ERROR.finditer(text)
            if m.group(1) in ("SourceError", "StateError", "StaleBatchError", "TopologyError")]
    if ours:
        return ours[-1].group(2).strip()
    for proc in processors:
        if proc.failure is not None:
            text = str(proc.failure)
    matches = list(_PY_ERROR.finditer(text))
    if matches:
        return f"{matches[-1].group(1)}: {matches[-1].group(2).strip()}"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:500]


def persistence_warnings(pipelines: list[StreamPipeline]) -> list[str]:
    """Why the HWM stores of ``pipelines`` would lose their marks on a restart (one line each)."""
    import redis

    out: list[str] = []
    seen: set[str] = set()
    for p in pipelines:
        filtering = bool(p.settings["jw.sqe.spout.kafka.filterReplays"])
        if p.source is None or not filtering or p.source.hwm_endpoint.display in seen:
            continue
        endpoint = p.source.hwm_endpoint
        seen.add(endpoint.display)
        try:
            client = endpoint.connect()
            try:
                warning = persistence_warning(client, f"the HWM store at {endpoint.display}")
            finally:
                client.close()
        except redis.RedisError as exc:
            warning = (f"cannot tell whether the HWM store persists its marks: "
                       f"{endpoint.describe_error(exc)}")
        if warning:
            out.append(warning)
    return out


def run_topology(plan: TopologyPlan, spark: SparkSession, name: str, checkpoint: str | Path,
                 mode: Mode = "forever", runtime: float | None = None,
                 on_start: Callable[[list[Any]], None] | None = None) -> list[BatchReport]:
    """Run every stream of ``plan`` until done (``once``), ``runtime`` seconds, or forever.

    Returns the batch reports; a failed query raises :class:`RunError` after
    stopping the others.
    """
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(FixedSource)
    if "spark.sql.session.timeZone" not in plan.spark_conf:
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # SQE's dates are UTC
    pipelines = build_pipelines(plan, name)
    for warning in persistence_warnings(pipelines):
        log.warning(f"warning: {warning}")
    reports: list[BatchReport] = []
    processors = []
    queries = []
    root = Path(checkpoint)
    where = progress_path(checkpoint)
    progress = ProgressLog(where, name) if where is not None else None
    try:
        for p in pipelines:
            proc = BatchProcessor(p, reports, progress)
            processors.append(proc)
            writer = (_source_frame(spark, p).writeStream
                      .queryName(f"{name}.{p.stream.streamName}")
                      .option("checkpointLocation", str(root / p.stream.streamName))
                      .foreachBatch(proc))
            writer = writer.trigger(availableNow=True) if mode == "once" else writer
            queries.append(writer.start())
        if on_start is not None:
            on_start(queries)
        deadline = time.monotonic() + runtime if (mode == "runtime" and runtime) else None
        while True:
            for q in queries:
                if q.exception() is not None:
                    raise q.exception()
            active = [q for q in queries if q.isActive]
            if not active or (deadline is not None and time.monotonic() >= deadline):
                break
            active[0].awaitTermination(1.0)  # raises if that query failed
        for q in queries:
            if q.exception() is not None:
                raise q.exception()
    except SqeError:
        raise
    except Exception as exc:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        if isinstance(exc, (PySparkException, Py4JError)):
            raise RunError(describe_failure(exc, processors)) from None
        raise
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    return reports
