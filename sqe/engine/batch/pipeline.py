"""What runs for each stream of a planned topology: its source, its pid and its queries' sinks.

:func:`build_pipelines` turns a :class:`~sqe.config.plan.TopologyPlan` into one
:class:`StreamPipeline` per ``CreateStream``: the source to read (the
``sqe-kafka`` source's config, Spark's own connector, or the rows of a FIXED
stream), the pid stamped on what it writes (MurmurHash64A of topology + stream +
``<cluster id>/<topic>``, unless ``jw.sqe.pid`` sets it), the consumer name of
its high-water marks (``<topology>.<stream>``), and every query that reads from
it -- directly, or through intermediate streams without a ``stateName`` -- in
file order, each with the :class:`~state.sink.Sink` of its state.
:func:`check_fields` holds a JSON stream's first batch against the fields its queries read.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

import redis
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame

from sqe.clients.kafka import cluster_metadata, consumer_conf, new_consumer
from sqe.config.plan import TopologyPlan
from sqe.config.settings import unless_refused
from sqe.config.views import StreamSettings
from sqe.errors import SourceError, TopologyError
from sqe.lang.compiler import aggregates_of, analysis_error, compile_expression
from sqe.lang.references import query_fields, query_references
from sqe.lang.spark_functions import CompileContext
from sqe.lang.topology import CreateStream, Query
from sqe.ledger.commits import Commit
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import answered
from sqe.source.fixed import fixed_options
from sqe.source.json_fields import arrow_fields
from sqe.source.kafka import KafkaStreamReader
from sqe.source.kafka.config import SourceConfig, by_partition, parse_offsets
from sqe.source.kafka.offsets import offsets_json
from sqe.wire.keys import kafka_secondary_id, pid_for
from state.registry import SINKS, sink_for, sink_problems
from state.sink import Sink, SinkTarget

__all__ = ["QueryStep", "StreamPipeline", "StreamStores", "build_pipelines", "check_fields",
           "sink_target", "state_problems", "stream_source", "stream_stores"]

T = TypeVar("T")


@dataclass(frozen=True)
class QueryStep:
    """One query of a stream's pipeline: where it is (for messages), and its state's sink."""

    where: str
    query: Query
    sink: Sink | None  # None: the query feeds an intermediate stream

    def with_state_columns(self, frame: DataFrame) -> DataFrame:
        """``frame`` (the query's output) with the columns its state needs besides the
        fields (:meth:`state.sink.Sink.columns`)."""
        extra = self.state_columns(frame)
        return frame.select("*", *[c.alias(n) for n, c in extra.items()]) if extra else frame

    def state_columns(self, frame: DataFrame) -> dict[str, Column]:
        """The columns the query's state needs besides the fields, compiled over ``frame``
        (the query's output): name -> Column."""
        extra = self.sink.columns() if self.sink is not None else {}
        ctx = CompileContext(frame)  # the frame's types give SQE's semantics
        out = {}
        for col, (e, what) in extra.items():
            try:
                out[col] = compile_expression(e, f"{self.where} -> {what}", ctx)
                frame.select(out[col])  # analysed here, to locate an error
            except AnalysisException as exc:
                raise analysis_error(f"{self.where} -> {what}", exc) from None
        return out


@dataclass(frozen=True)
class StreamPipeline:
    """A CreateStream and everything that runs in its foreachBatch."""

    stream: CreateStream
    settings: StreamSettings
    steps: tuple[QueryStep, ...]
    pid: int
    consumer: str
    source: SourceConfig | None = None  # the sqe-kafka source; None for FIXED and native
    fixed: dict[str, str] | None = None  # the sqe-fixed reader options of a FIXED stream
    #: the JSON field types its batches learned (:mod:`sqe.engine.batch.learned_types`), when its
    #: file declares none: its one pass reads them so, and takes no record of other types
    learned: dict[str, str] | None = None

    @property
    def native(self) -> bool:
        """Whether Spark's own Kafka connector reads this stream."""
        return self.stream.spoutName == "KAFKA" and self.settings.format == "native"

    @property
    def learns(self) -> bool:
        """Whether this stream's JSON field types are learned from its batches (a JSON stream
        read by the ``sqe-kafka`` source whose file declares no fields)."""
        return (self.source is not None and self.stream.deserializer == "json"
                and self.settings.declared_fields is None)

    @property
    def json_types(self) -> dict[str, str | None] | None:
        """The JSON fields extracted and their types: the declared ones, else the learned."""
        declared = self.settings.declared_fields
        return dict(self.learned) if declared is None and self.learned is not None else declared

    def with_learned(self, types: dict[str, str] | None) -> StreamPipeline:
        """This pipeline with the JSON field types ``types`` learned (None: none), its source
        reading them."""
        source = self.source
        if source is not None:
            source = replace(source, json_fields=tuple(arrow_fields(types) or ()))
        return replace(self, learned=types, source=source)

    @property
    def filtering(self) -> bool:
        """Whether this stream filters replays (and so commits to an HWM store)."""
        return self.stream.spoutName == "KAFKA" and self.settings.filter_replays

    @property
    def stores(self) -> StreamStores:
        """The stores this stream commits to."""
        return StreamStores(self.consumer, self.settings, self.filtering,
                            tuple(step.sink for step in self.steps if step.sink is not None))

    def starting_at(self, offsets: str, why: str = "--resume-from-store") -> StreamPipeline:
        """This pipeline reading from ``offsets`` (``{"0": 42}``; a FIXED stream: ``{"rows": 3}``)
        instead of ``startingOffsets``, for a run that resumes from the stores (``why``: where
        the offsets come from, in messages)."""
        if self.fixed is not None:
            return replace(self, fixed={**self.fixed, "start": str(json.loads(offsets)["rows"])})
        flat = json.dumps(offsets_json(parse_offsets(offsets)))  # a hop's too
        settings = StreamSettings(self.settings.settings.overlay(
            {StreamSettings.starting_offsets.key: flat}, why))
        source = (replace(self.source, stream=settings) if self.source is not None else None)
        return replace(self, settings=settings, source=source)

    def initial_offsets(self) -> str | None:
        """Where the ``sqe-kafka`` source would start now, as JSON offsets (``startingOffsets``
        resolved against the brokers' watermarks); None for other sources."""
        if self.source is None:
            return None
        reader = KafkaStreamReader(self.source)
        try:
            return json.dumps(offsets_json(by_partition(reader.initialOffset())))
        finally:
            reader.stop()

    @property
    def wanted_fields(self) -> list[str]:
        """Field names the queries on this stream read, Spark SQL strings' columns included
        (a JSON stream makes missing ones NULL)."""
        names: list[str] = []
        for step in self.steps:
            if step.query.from_.objectName == self.stream.streamName:
                names += [n for n in query_fields(step.query) if n not in names]
        return names


@dataclass(frozen=True)
class StreamStores:
    """The stores one stream commits to: its HWM store (with filterReplays) and its sinks."""

    consumer: str
    settings: StreamSettings
    filtering: bool
    sinks: tuple[Sink, ...]

    def hwm_store(self) -> HwmStore | None:
        """The consumer's HWM store (its client to be closed by the caller), or None; its
        commits as the settings ask (replicas, retries)."""
        if not self.filtering:
            return None
        s = self.settings
        try:
            return HwmStore.from_url(s.hwm_store, self.consumer, s.hwm_ttl, s.hwm_replicas,
                                     s.hwm_replica_timeout, s.hwm_commit_retry)
        except redis.RedisError as exc:
            raise SourceError(f"cannot reach the HWM store of {self.consumer}: "
                              f"{s.hwm_store.describe_error(exc)}") from None

    def _hwm(self, action: Callable[[HwmStore], T]) -> T | None:
        store = self.hwm_store()
        if store is None:
            return None
        try:
            return answered(store, lambda: action(store), f"consumer {self.consumer}",
                            "the request", f"{store.describe()}: consumer {self.consumer}",
                            self.settings.hwm_commit_retry)
        finally:
            store.client.close()

    def hwm_commit(self) -> Commit | None:
        """What the HWM store holds of the consumer's last committed batch (None: nothing, or
        no HWM store)."""
        return self._hwm(lambda store: store.last_commit())

    def finish_applying(self) -> None:
        """Apply the rows the consumer's last commit left to apply (a run stopped mid-way)."""
        self._hwm(lambda store: store.finish_applying())

    def committed(self) -> list[Commit]:
        """What the stores hold of the consumer's last committed batch."""
        commits = [self.hwm_commit()]
        commits += [sink.committed(self.consumer) for sink in self.sinks]
        return [c for c in commits if c is not None]

    def marks(self) -> int | None:
        """How many high-water marks the HWM store holds (None: no HWM store)."""
        return self._hwm(lambda store: store.count())

    def reset(self) -> None:
        """Forget the consumer's marks and committed offsets everywhere, keeping its batch ids."""
        self._hwm(lambda store: store.reset())
        for sink in self.sinks:
            sink.reset(self.consumer)


def check_fields(pipeline: StreamPipeline, present: tuple[str, ...],
                 missing: tuple[str, ...]) -> None:
    """A :class:`TopologyError` naming the first field a query on the stream reads that is
    ``missing`` from a batch whose JSON records hold the fields ``present``, with the closest
    name (a misspelt field would otherwise be NULL in every row)."""
    stream = pipeline.stream
    for step in pipeline.steps:
        if step.query.from_.objectName != stream.streamName:
            continue
        for ref in query_references(step.query):
            if ref.name in missing:
                close = difflib.get_close_matches(ref.name, present, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else (
                    f" (its records hold {', '.join(present[:12])})")
                raise TopologyError(
                    f"{step.where} -> {' -> '.join(ref.place)}: no record of the first batch "
                    f"of stream {stream.streamName} (topic {stream.objectName}) has a field "
                    f"{ref.name}{hint}, so the run stops before writing anything; declare the "
                    "stream's fields (jw.sqe.spout.fields) to allow a field that is often "
                    "absent")


def sink_target(plan: TopologyPlan, query: Query) -> SinkTarget:
    """What ``query`` writes (its state's name, fields, aggregates and options)."""
    t = plan.topology
    into = query.insertInto
    return SinkTarget(into.objectName, tuple(into.fields), plan.state_settings(query),
                      aggregates_of(query), into.stateType, f"{t.path}: {t.label(query)}")


def state_problems(plan: TopologyPlan) -> list[str]:
    """What each query's state lacks (checked by the state itself), one located sentence each;
    a state whose check reads an option whose value was refused is left out (the refusal is
    reported)."""
    problems: list[str] = []
    for index, command in enumerate(plan.topology.commands):
        if not isinstance(command, Query) or index not in plan.states:
            continue
        name = command.insertInto.stateName
        if name:
            problems += unless_refused(partial(sink_problems, name, sink_target(plan, command)), [])
    return problems


def stream_stores(plan: TopologyPlan, name: str, stream: CreateStream) -> StreamStores:
    """The stores stream ``stream`` of a topology named ``name`` commits to (no broker asked)."""
    s = plan.streams[stream.streamName]
    filtering = stream.spoutName == "KAFKA" and s.filter_replays
    return StreamStores(f"{name}.{stream.streamName}", s, filtering, tuple(
        step.sink for step in _steps(plan, stream) if step.sink is not None))


def _steps(plan: TopologyPlan, stream: CreateStream) -> tuple[QueryStep, ...]:
    t = plan.topology
    reachable = {stream.streamName}
    found = []
    for command in t.commands:
        if isinstance(command, Query) and command.from_.objectName in reachable:
            reachable.add(command.insertInto.objectName)
            name = command.insertInto.stateName
            where = f"{t.path}: {t.label(command)}"
            if name is not None and name not in SINKS:
                raise TopologyError(f"{where} -> insertInto -> stateName: expected one of "
                                    f"{', '.join(SINKS)}")
            sink = sink_for(name, sink_target(plan, command)) if name is not None else None
            found.append(QueryStep(where, command, sink))
    return tuple(found)


def _cluster_id(stream: StreamSettings, topic: str) -> str | None:
    client = new_consumer(consumer_conf(stream.bootstrap, "sqe-metadata",
                                        stream.consumer_properties, quiet=True), "metadata")
    try:
        return cluster_metadata(client, topic, stream.bootstrap, SourceError, "Kafka source",
                                timeout=stream.read_timeout).cluster_id
    finally:
        client.close()


def _pid(name: str, stream: CreateStream, s: StreamSettings) -> int:
    if s.pid is not None:
        return int(s.pid)
    if stream.spoutName == "FIXED":  # SQE's pid of a fixed stream: hash64(topology + stream)
        return pid_for(name, stream.streamName, "")
    secondary = kafka_secondary_id(_cluster_id(s, stream.objectName), s.brokers,
                                   stream.objectName)
    return pid_for(name, stream.streamName, secondary)


def build_pipelines(plan: TopologyPlan, name: str) -> list[StreamPipeline]:
    """The pipelines of a topology named ``name`` (the name in every pid and consumer)."""
    pipelines = []
    for stream in plan.topology.streams:
        s = plan.streams[stream.streamName]
        consumer = f"{name}.{stream.streamName}"
        if stream.spoutName not in ("KAFKA", "FIXED"):
            raise TopologyError(f"{plan.topology.path}: {plan.topology.label(stream)}: sqe run "
                                f"reads KAFKA and FIXED streams; spoutName {stream.spoutName} "
                                "is for sqe validate only")
        steps = _steps(plan, stream)
        pid = _pid(name, stream, s)
        if stream.spoutName == "FIXED":
            fixed = fixed_options(stream.objectName, s.fixed_fields or [], s.fixed_rows or [])
            pipelines.append(StreamPipeline(stream, s, steps, pid, consumer, fixed=fixed))
        else:
            pipelines.append(StreamPipeline(stream, s, steps, pid, consumer,
                                            stream_source(plan, name, stream, steps)))
    return pipelines


def stream_source(plan: TopologyPlan, name: str, stream: CreateStream,
                  steps: Sequence[QueryStep] = ()) -> SourceConfig | None:
    """The ``sqe-kafka`` source of stream ``stream`` of a topology named ``name`` (with the
    producers its ``steps``' states write with, for its workers to make ahead); None for a
    FIXED stream and for Spark's own connector (no broker asked)."""
    s = plan.streams[stream.streamName]
    if stream.spoutName != "KAFKA" or s.format == "native":
        return None
    fields = arrow_fields(s.declared_fields) if stream.deserializer == "json" else None
    producers = {role: conf for step in steps if step.sink is not None
                 for role, conf in step.sink.producers().items()}
    return SourceConfig(stream.objectName, s, f"{name}.{stream.streamName}", emit_tally=True,
                        json_fields=fields or (), producers_ahead=producers,
                        value_format=plan.reader_schemas.get(stream.streamName))

