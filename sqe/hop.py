"""SQE from plain PySpark: one hop of an exactly-once chain, without a topology file.

A :class:`Hop` is a stream read by a consumer (``<topology>.<stream>``) and the states it
writes, with the options of a topology (config files, ``conf``, each state's own); the user's
PySpark code, between :meth:`Hop.read` and the function :meth:`Hop.exactly_once` wraps, is
the hop's query.  It runs on the engine that runs topology files: the same source and replay
filter, the same admission of each batch against the stores, the same states and commit.

Example (the second hop of the README's chain, with a user transform)::

    import sqe
    from pyspark.sql import functions as F

    hop = sqe.Hop(
        "load.enriched", topic="enriched", checkpoint="checkpoints/load",
        config=["conf/local.yaml"], deserializer="json",
        conf={"jw.sqe.spout.kafka.filterReplays": True,
              "jw.sqe.spout.fields": {"event_id": "string", "region": "string",
                                      "amount_cents": "bigint"}},
        into=[sqe.InsertInto(objectName="events_by_region", stateName="REDIS",
                             fields=["region", "event_id", "amount_cents"],
                             options={"jw.sqe.state.redis.datatype": "HASH",
                                      "jw.sqe.state.redis.keyname.fields": ["region"],
                                      "jw.sqe.state.redis.fieldname.fields": ["event_id"]})])
    rows = hop.read(spark)                       # the stream's records, replays dropped

    def load(batch_rows, batch):                 # batch.id: as the stores count it
        batch.write("events_by_region", batch_rows.where(F.col("amount_cents") > 0))

    hop.run(rows.writeStream.option("checkpointLocation", hop.checkpoint)
            .foreachBatch(hop.exactly_once(load)))   # until it ends; a failure: SQE's error

Problems with the hop's options are raised by the constructor as one
:class:`~sqe.errors.TopologyError` (each located as ``hop <consumer>: command N``: command 1
is the stream, command N+1 the N-th state of ``into``); what the user's code gets wrong at
run time fails the batch in one sentence, nothing of it committed (:mod:`sqe.engine.batch.hop_batch`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from time import monotonic
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from sqe.config.plan import TopologyPlan
from sqe.config.settings import ConfigFile, load_config
from sqe.engine.batch.hop_batch import HopBatch, UserWay
from sqe.engine.batch.hop_sink import HopSink, HopSpec, sink_frame
from sqe.engine.batch.joined import JoinedHop
from sqe.engine.batch.late_records import LateRecords
from sqe.engine.batch.one_pass import stream_records
from sqe.engine.batch.pipeline import StreamPipeline, build_pipelines
from sqe.engine.batch.processor import BatchProcessor
from sqe.engine.batch.source_reads import SourceReads, reports_reads
from sqe.engine.batch.stream_frame import source_frame
from sqe.engine.run.failure import describe_failure, failure_error
from sqe.engine.run.lost_marks import find_lost_marks
from sqe.engine.run.planning import plan_run, session_options
from sqe.engine.run.query_starts import QueryStarts, not_back, start_query
from sqe.engine.run.start import PreparedStream, default_rerun, prepare_stream
from sqe.engine.spark.checkpoint import StreamCheckpoint, local_checkpoint, use_file_system_manager
from sqe.engine.spark.spark_api import is_connect
from sqe.errors import OptionError, RunError, TopologyError
from sqe.lang.topology import InsertInto, Topology, parse_commands
from sqe.observe.batch_report import BatchReport
from state.registry import SINKS

__all__ = ["Hop", "HopBatch"]

#: How many batch reports a hop keeps (:attr:`Hop.reports`).
KEPT = 100


class Hop:
    """One hop of a chain, written by the user's PySpark code (see the module docstring).

    Args:
        consumer: ``<topology>.<stream>``: the name of its high-water marks and commit record,
            and (with the topic's cluster) of the pid its Kafka states key their rows by.
        topic: the Kafka topic it reads.
        into: its states, as a topology's ``insertInto`` (objects or maps).
        checkpoint: the streaming query's checkpoint (give :attr:`checkpoint` to
            ``writeStream.option("checkpointLocation", ...)``); None where Spark Declarative
            Pipelines keeps it (the hop's start is then not checked against its stores).
        config: config files, as ``sqe run --config``.
        conf: options over them, as ``sqe run --conf``.
        deserializer: ``json`` (with ``jw.sqe.spout.fields`` and their types) gives the
            records' fields as columns, ``avro`` or ``protobuf`` the fields of the reader
            schema (a Schema Registry's subject, or ``jw.sqe.spout.schema.file``); None
            gives the record's bytes (``_value``).
        accept_lost_marks: go on although the HWM store lost the commits up to this batch
            (the one a refusal names); without it such a store is refused in :meth:`read`.
    """

    def __init__(self, consumer: str, topic: str,
                 into: Sequence[InsertInto | Mapping[str, Any]] = (), *,
                 checkpoint: str | Path | None = None,
                 config: Sequence[str | Path | ConfigFile] = (),
                 conf: Mapping[str, Any] | None = None, deserializer: str | None = None,
                 accept_lost_marks: int | None = None) -> None:
        name, dot, stream = consumer.partition(".")
        if not (name and dot and stream):
            raise OptionError(f"hop {consumer!r}: a consumer is <topology>.<stream>, e.g. "
                              "load.enriched")
        self.consumer = consumer
        self.name = name
        self._location = str(checkpoint) if checkpoint is not None else None
        self._accept_lost = accept_lost_marks
        self._configs = [c if isinstance(c, ConfigFile) else load_config(c) for c in config]
        self._conf = conf
        self._deserializer = deserializer
        self.plan = _planned(_topology(consumer, stream, topic, into, deserializer),
                             self._configs, conf, deserializer)
        self.reports: list[BatchReport] = []  # the last KEPT batches' reports, oldest first
        self._prepared: PreparedStream | None = None
        self._pipeline: StreamPipeline | None = None
        # the Kafka states the sqe-hop sink keys by batch, once sink_frame planned its states
        self._keyed: tuple[int, ...] | None = None
        self._spark: SparkSession | None = None  # the session of read()

    @property
    def checkpoint(self) -> str | None:
        """The streaming query's checkpoint location (as resolved by :meth:`read`)."""
        return self._prepared.checkpoint.location if self._prepared else self._location

    def read(self, spark: SparkSession) -> DataFrame:
        """The hop's streaming DataFrame: its records (replays dropped with filterReplays),
        with the source's columns (``_partition``, ``_offset``, ``_pid``, ...), the
        StreamMetadata each carries to the next hop (``_sqe_pid``, ``_sqe_partition``,
        ``_sqe_offset``) and, with ``deserializer="json"``, the declared fields.  Its start is
        agreed with the stores first, as ``sqe run``'s is."""
        spark.dataSource.register(HopSink)  # sqe-kafka: each stream's own (source_frame)
        self.plan = self._in(spark)
        (p,) = build_pipelines(self.plan, self.name)
        if p.source is not None and p.filtering:  # the marks are what the source read
            p = replace(p, source=replace(p.source, report_read=True, emit_tally=False))
        if self._location is not None:
            root = local_checkpoint(spark, self._location)
            use_file_system_manager(spark, root)
            checkpoint = StreamCheckpoint(spark, root, p.source.offsets_topic if p.source else None)
            self._prepared = prepare_stream(p, checkpoint, False,
                                            default_rerun(self.plan), self._accept_lost)
            p = self._prepared.pipeline
        self._pipeline = p
        self._spark = spark
        return stream_records(p, source_frame(spark, p)).frame

    def _in(self, spark: SparkSession) -> TopologyPlan:
        """The hop's plan in ``spark``: planned again, by the same function, with the
        ``spark.jw.sqe.*`` options the session carries beyond its config files' on top (as
        ``sqe run`` under ``spark-submit --conf``); its plan as it is when it carries none."""
        carried = session_options(self.plan, spark)
        if carried is None:
            return self.plan
        return _planned(self.plan.topology, self._configs, self._conf, self._deserializer,
                        carried)

    def rebuild_marks(self, spark: SparkSession | None = None) -> str:
        """Give an HWM store that lost this hop's marks (a refusal of :meth:`read` names this)
        them back: read from its topic up to its checkpoint's last finished batch and commit
        them as that batch (:mod:`sqe.engine.run.lost_marks`); what was done, in one sentence.
        Stop the hop's query first.  ``spark``: for a checkpoint off the local disk."""
        if self._location is None:
            raise RunError(f"hop {self.consumer}: rebuild_marks() reads the checkpoint's last "
                           "batch; give the hop its checkpoint (Hop(..., checkpoint=...))")
        (p,) = build_pipelines(self.plan, self.name)
        if p.source is None or not p.filtering:
            return f"{self.consumer}: it filters no replays; nothing to rebuild"
        root = local_checkpoint(spark, self._location) if spark is not None else self._location
        found = find_lost_marks(p.stores, p.source,
                                StreamCheckpoint(spark, root, p.source.topic))
        if isinstance(found, str):
            return found
        return f"{found.describe(p.source.topic)}; {found.commit()}"

    def sink_frame(self, rows: DataFrame) -> DataFrame:
        """``rows`` (the hop's records as the user's transform left them) as the ``sqe-hop``
        sink writes them: every state gets every row and takes its fields."""
        p = self._read_first("sink_frame")
        store = p.stores.hwm_store()
        try:
            frame, self._keyed = sink_frame(p, rows, store)
        finally:
            if store is not None:
                store.client.close()
        return frame

    def sink_options(self, also: Sequence[Hop] = ()) -> dict[str, str]:
        """The options of the ``sqe-hop`` sink that writes this hop's states, for
        ``writeStream.format("sqe-hop").options(...)`` or Declarative Pipelines'
        ``create_sink(name, "sqe-hop", options)``; ``also``: as :meth:`exactly_once`'s."""
        p = self._read_first("sink_options")
        joined = tuple(self._joined(other).pipeline for other in also)
        if self._keyed is None:  # the states learn the rows' types from it (Postgres's table)
            raise RunError(f"hop {self.consumer}: call sink_frame(rows) before "
                           "sink_options(): the sink's states are planned from the rows")
        return {"hop": HopSpec(p, self._prepared.base if self._prepared else 0,
                               self._keyed, self._accept_lost, joined).dump()}

    def write_stream(self, rows: DataFrame, also: Sequence[Hop] = ()) -> DataStreamWriter:
        """``rows`` written to the hop's states by the ``sqe-hop`` sink: the streaming writer,
        with its checkpoint, to start (``.start()``, after a trigger if wanted); ``also``: as
        :meth:`exactly_once`'s."""
        writer = (self.sink_frame(rows).writeStream.format(HopSink.name())
                  .options(**self.sink_options(also)).queryName(self.consumer))
        return writer.option("checkpointLocation", self.checkpoint) if self.checkpoint \
            else writer

    @staticmethod
    def explain(failure: BaseException) -> str:
        """Why a hop's query failed (what its ``start()`` or ``awaitTermination()`` raised), in
        one sentence: SQE's own where it is SQE's (a refusal raised in a batch, on an executor
        or on a Spark Connect server too), else the cause Spark gives, without its traces."""
        return describe_failure(failure)

    @staticmethod
    def await_termination(query: StreamingQuery, timeout: int | None = None) -> bool | None:
        """``query.awaitTermination(timeout)`` (a classic or a Spark Connect query), its failure
        raised as SQE's error: the :mod:`sqe.errors` class and sentence of the refusal that
        stopped it (in a batch, a write task or on a Connect server), else a
        :class:`~sqe.errors.RunError` with the cause Spark gives, so the sentence is what the
        traceback ends with, without Spark's traces; Spark's own exception is its
        ``__context__``."""
        try:
            return query.awaitTermination(timeout) if timeout is not None \
                else query.awaitTermination()
        except (PySparkException, Py4JError) as exc:
            raise failure_error(exc) from None

    def run(self, writer: DataStreamWriter, timeout: float | None = None) -> StreamingQuery:
        """Start the hop's query (``writer``: its ``writeStream``, with the checkpoint and a
        trigger if wanted, as :meth:`write_stream` returns it) and wait until it ends, or for
        ``timeout`` seconds; the query, which runs on after a timeout.

        As ``sqe run`` does, a query whose Python process did not connect back within Spark's
        fixed 10 s (a busy machine: the planner of the hop's stream, or over Spark Connect the
        process of its ``foreachBatch``) is started again from its checkpoint, each time with a
        warning, up to 3 starts in a row without a batch between; then it ends in one sentence.
        Every batch commits with its id, so nothing is written twice.  Any other failure is
        raised as :meth:`await_termination` raises it."""
        end = None if timeout is None else monotonic() + timeout
        starts = QueryStarts([])
        try:
            starts.start(self.consumer, lambda: start_query(writer, self.consumer))
        except (PySparkException, Py4JError) as exc:
            raise failure_error(exc) from None
        while True:
            query = starts.queries[0]
            try:
                left = None if end is None else max(0.0, end - monotonic())
                query.awaitTermination(left) if left is not None else query.awaitTermination()
                return query
            except (PySparkException, Py4JError) as exc:
                if not not_back(exc) or left == 0:
                    raise failure_error(exc) from None
                try:  # started again, or the sentence of a query that never connects back
                    again = starts.check()
                except (PySparkException, Py4JError) as failed:
                    raise failure_error(failed) from None
                if not again:
                    raise failure_error(exc) from None

    def _read_first(self, what: str) -> StreamPipeline:
        if self._pipeline is None:
            raise RunError(f"hop {self.consumer}: call read(spark) before {what}(...): the "
                           "read plans the hop's stream")
        return self._pipeline

    def exactly_once(self, function: Callable[[DataFrame, HopBatch], Any],
                     also: Sequence[Hop] = ()) -> Callable[[DataFrame, int], None]:
        """The ``foreachBatch`` function that runs ``function(rows, batch)`` in each batch:
        ``rows`` the batch's records, ``batch.write(state, frame)`` hands a state its frame;
        the batch's marks, id and staged rows are committed once it returns, and a batch the
        stores hold already is not run again.  Records Spark drops as later than a watermark
        are counted in :attr:`reports` (``late_dropped``) once Spark reports the batch.

        ``also``: the other hops the query reads (a stream-stream join), each read on the same
        session and checkpoint; their consumers commit their marks and the batch id after this
        hop's commit (:mod:`sqe.engine.batch.joined`), and this hop's states are the batch's."""
        if self._location is None:
            raise RunError(f"hop {self.consumer}: exactly_once(...) needs the hop's checkpoint "
                           "(Hop(..., checkpoint=...)), which its batches are counted by")
        if self._prepared is None:
            raise RunError(f"hop {self.consumer}: call read(spark) before exactly_once(...): "
                           "the read agrees the hop's start with its stores")
        s = self._prepared
        joined = [self._joined(other) for other in also]
        reads = SourceReads(s.pipeline, s.checkpoint, s.base) \
            if reports_reads(s.pipeline) else None
        if self._spark is not None and not is_connect(self._spark):  # its reports are here
            LateRecords(self.consumer, s.checkpoint, lambda: self.reports, s.base,
                        self._spark.streams)
        return BatchProcessor(s.pipeline, self._done, s.checkpoint, s.base,
                              way=UserWay(s.pipeline, function, reads), drain=True,
                              joined=joined)

    def _joined(self, other: Hop) -> JoinedHop:
        """``other``, read by this hop's query, as its batches commit it (checked)."""
        mine, theirs = self._prepared, other._prepared
        where = f"hop {self.consumer}: also=[{getattr(other, 'consumer', other)}]"
        if not isinstance(other, Hop) or other is self:
            raise RunError(f"{where}: also takes the other sqe.Hop objects the query reads")
        if mine is None:
            raise RunError(f"{where}: a join of hops is fenced by the batch ids of the query's "
                           "checkpoint: give both hops checkpoint=... and read them first")
        if theirs is None or other._spark is not self._spark:
            raise RunError(f"{where}: call read(spark) on that hop, with this hop's session, "
                           "before exactly_once(...): the read agrees its start with its stores")
        if theirs.checkpoint.location != mine.checkpoint.location:
            raise RunError(f"{where}: both hops are one query, with one checkpoint; give that "
                           f"hop checkpoint={self._location!r} too (it has "
                           f"{other._location!r})")
        if not (reports_reads(mine.pipeline) and reports_reads(theirs.pipeline)):
            raise RunError(f"{where}: each hop of a join filters replays "
                           "(jw.sqe.spout.kafka.filterReplays), by which its batches are counted")
        topic = mine.checkpoint.topic
        if theirs.checkpoint.topic == topic:
            raise RunError(f"{where}: both read topic {topic}, whose offsets the checkpoint "
                           "cannot tell apart; read it with one hop")
        if theirs.base != mine.base:
            raise RunError(f"{where}: its stores count this checkpoint's batch 0 as batch "
                           f"{theirs.base}, and this hop's as {mine.base}, so one batch id "
                           "cannot fence both; start the join on a new checkpoint after "
                           f"`sqe hwm reset` of one of them")
        return JoinedHop(theirs.pipeline, theirs.checkpoint, theirs.base)

    def _done(self, report: BatchReport) -> None:
        self.reports = [*self.reports[-(KEPT - 1):], report]


def _topology(consumer: str, stream: str, topic: str,
              into: Sequence[InsertInto | Mapping[str, Any]], deserializer: str | None
              ) -> Topology:
    """The hop as a topology: its stream, and one query per state whose select the user's
    function stands for."""
    raw: list[Any] = [{"CreateStream": {
        "streamName": stream, "objectName": topic, "spoutName": "KAFKA",
        **({"deserializer": deserializer} if deserializer else {})}}]
    for target in into:
        spec = (target.model_dump(by_alias=True, exclude_none=True)
                if isinstance(target, InsertInto) else dict(target))
        fields = spec.get("fields")
        width = len(fields) if isinstance(fields, list) and fields else 1
        raw.append({"Query": {"insertInto": spec, "select": {"expressions": [None] * width},
                              "from": {"objectName": stream}}})
    source = f"hop {consumer}"
    return Topology(source, consumer.partition(".")[0], parse_commands(raw, source, tuple(SINKS)))


def _planned(topology: Topology, configs: Sequence[ConfigFile], conf: Mapping[str, Any] | None,
             deserializer: str | None, spark_conf: Mapping[str, Any] | None = None
             ) -> TopologyPlan:
    """The hop's topology planned and checked as a topology file is (:func:`plan_run`), and
    what a hop's streaming DataFrame needs of its deserializer."""
    plan = plan_run(topology, configs, conf, spark_conf)
    (s,) = plan.streams.values()
    declared = s.declared_fields
    if deserializer == "json" and (declared is None or None in declared.values()):
        raise TopologyError(f"{topology.path}: deserializer json needs every field declared "
                            "with its type in jw.sqe.spout.fields (a streaming DataFrame's "
                            "types are planned once, not inferred per batch)")
    return plan
