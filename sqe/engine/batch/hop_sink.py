"""A hop's states as Spark's own streaming sink: the ``sqe-hop`` Python data source writer.

``df.writeStream.format("sqe-hop")`` and Spark Declarative Pipelines' ``create_sink(name,
"sqe-hop", options)`` take it.  It is the one-pass batch (:mod:`sqe.engine.batch.one_pass_batch`)
cut where Spark's sink protocol cuts: each write task runs the one-pass task
(:func:`~sqe.engine.batch.one_pass_task.pass_task`) over its rows, and Spark's
``commit(messages, batchId)``, on the driver once every task succeeded, adds up what they
found and commits the marks, the batch id and the staged rows to the HWM store in one step
(:func:`~sqe.engine.batch.commit.commit_hwm`).  Nothing on the driver scales with the records.

The frame it writes is :func:`sink_frame` of the hop's rows: every state gets every row (each
takes its fields).  The sink is planned per batch on no driver of the user's, so what differs
from the one-pass batch is where its parts are decided:

* the batch id is Spark's (``streaming.sql.batchId``, a task's local property) plus the hop's
  base, and the writer that stages rows is this run of the streaming query (its run id, new at
  each start, so two runs on one checkpoint never share a stage) and the task's partition:
  each task stages under keys of its own, which a retry of the task clears first, and the
  commit applies the keys its successful tasks name;
* a task whose batch the store holds already writes nothing (Spark ran a committed batch
  again), and the commit of a batch the store holds commits nothing;
* a Kafka state needs each source partition's records in one task, in order: a transform that
  spread one over several tasks (a shuffle) fails the batch in one sentence before its commit;
  rows with none of the carried StreamMetadata (an aggregation's) are keyed by batch, each task
  its own partition of keys (:func:`~sqe.engine.batch.keys.keyed_task`).

States written so: Kafka, Redis states that are not aggregates (their tasks write or stage the
rows) and Postgres (its tasks build the CSV that the commit copies in the batch's transaction,
with the batch id, before the HWM commit); the others are refused when the frame is planned.
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sqe.engine.batch.joined import JoinedHop
from sqe.engine.batch.keys import keyed_task
from sqe.engine.batch.one_pass import BAD, MARKED, RAW, REFUSED, state_column
from sqe.engine.batch.one_pass_batch import count_source
from sqe.engine.batch.one_pass_task import merge_results, pass_task
from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.batch.protocol import States, commit
from sqe.engine.batch.source_reads import SourceReads, reports_reads
from sqe.engine.spark.arrow_writer import ArrowStreamWriter
from sqe.errors import ArgumentError, StateError, StoreBehind, TopologyError
from sqe.ledger.hwm import HwmStore, Stage
from sqe.ledger.retry import answered
from sqe.observe.batch_report import BatchReport
from sqe.wire.columns import CARRIED
from state.kafka.sink import KafkaSink
from state.sink import Batch, RowTask, Sink

__all__ = ["HopSink", "HopSpec", "sink_frame"]

log = logging.getLogger("sqe")
T = TypeVar("T")

@dataclass(frozen=True)
class HopSpec:
    """What the sink's tasks and its commit need: the hop's pipeline (its states' sinks) and
    the id the stores count Spark's batch 0 as; travels in the sink's options."""

    pipeline: StreamPipeline
    base: int = 0
    keyed: tuple[int, ...] = ()  # the Kafka states whose rows are keyed by batch
    accepted: int | None = None  # the batch whose lost marks the operator accepts losing
    #: the other hops the query reads (a join), whose consumers commit after this one's
    joined: tuple[StreamPipeline, ...] = ()

    def dump(self) -> str:
        """The spec as the sink's option ``hop``."""
        return base64.b64encode(pickle.dumps(self)).decode()

    @classmethod
    def load(cls, text: str) -> HopSpec:
        """The spec of a sink's option ``hop``."""
        spec = pickle.loads(base64.b64decode(text))
        if not isinstance(spec, cls):
            raise ArgumentError(f"option hop holds a {type(spec).__name__}, not a hop")
        return spec

    def store(self) -> HwmStore | None:
        """The hop's HWM store (its client closed by the caller), or None."""
        return self.pipeline.stores.hwm_store()

    def sinks(self) -> list[Sink]:
        """The states' sinks, in the order of the hop's ``into``."""
        return [step.sink for step in self.pipeline.steps if step.sink is not None]


def sink_frame(p: StreamPipeline, frame: DataFrame, hwm: HwmStore | None
               ) -> tuple[DataFrame, tuple[int, ...]]:
    """The rows the ``sqe-hop`` sink writes for hop ``p``: each of ``frame``'s rows once, with
    the columns its marks are found by and each state's task columns, as a one-pass plan's;
    and the Kafka states whose rows the sink's tasks key by batch (``frame`` carries no
    StreamMetadata).  ``hwm``: the hop's HWM store (a Redis state in its database stages its
    rows)."""
    where = f"hop {p.consumer}"
    if p.filtering and not reports_reads(p):
        raise TopologyError(f"{where}: its source does not report what it read (reportRead), "
                            "by which a batch's high-water marks are found")
    rows = frame
    have = set(frame.columns)
    raw = [(F.col(n) if n in have else F.lit(None).cast("long")).alias(f"{RAW}{n}")
           for n in MARKED]
    states: list[Column] = []
    keyed: list[int] = []
    for i, step in enumerate(p.steps):
        sink = step.sink
        assert sink is not None
        name = step.query.insertInto.objectName
        missing = [f for f in step.query.insertInto.fields if f not in have]
        if missing:
            raise TopologyError(f"{where}, state {name}: the rows have no column "
                                f"{', '.join(missing)} of the state's fields")
        lost = [c for c in CARRIED if c not in have] if isinstance(sink, KafkaSink) else []
        if 0 < len(lost) < len(CARRIED):
            raise TopologyError(f"{where}, state {name}: a Kafka state keys each row by the "
                                f"columns {', '.join(CARRIED)} that Hop.read gives, or by the "
                                f"batch when the rows have none of them; these have no "
                                f"{', '.join(lost)} (keep all three or drop all three)")
        if lost:  # keyed by batch in the sink's tasks
            keyed.append(i)
            rows = rows.withColumns({c: F.lit(None).cast(t) for c, t in zip(
                CARRIED, ("long", "int", "long"), strict=True)})
        with_extra = step.with_state_columns(rows)
        cols = sink.pass_columns(with_extra, hwm)
        if cols is None:
            raise TopologyError(f"{where}, state {name}: {sink.describe()} cannot be written by "
                                "the sqe-hop sink (Kafka, Postgres and Redis states that do not "
                                "aggregate can); write it from hop.exactly_once instead")
        rows = with_extra
        # a record's row, not a tally's (a hop whose source reports what it read has none)
        mine = F.col("_offset").isNotNull() if "_offset" in have else F.lit(True)
        states.append(F.when(mine, F.struct(*cols)).alias(state_column(i)))
        rejects = [c for c, _ in sink.rejects(with_extra)]
        if rejects:
            states.append(F.when(mine, F.coalesce(reduce(lambda a, b: a | b, rejects),
                                                    F.lit(False))).otherwise(False)
                          .alias(f"{REFUSED}{i}"))
    return rows.select(F.lit(False).alias(BAD), *raw, *states), tuple(keyed)


@dataclass
class HopMessage(WriterCommitMessage):
    """What one write task found and staged, for the commit on the driver."""

    results: bytes = b""  # the one-pass task's result rows (Arrow IPC)
    stages: list[Stage] = field(default_factory=list)
    writer: str = ""  # the streaming query's id, recorded with the commit
    written: bool = False  # False: the store held the batch already, nothing was written
    sources: dict[int, list[int]] = field(default_factory=dict)  # Kafka state -> partitions


class HopWriter(ArrowStreamWriter):
    """The ``sqe-hop`` sink's writer (see the module docstring)."""

    def __init__(self, spec: HopSpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema

    def write_batches(self, iterator: Iterator[pa.RecordBatch]) -> HopMessage:
        from pyspark import TaskContext  # an executor's, only in a task

        ctx = TaskContext.get()
        assert ctx is not None
        query = ctx.getLocalProperty("sql.streaming.queryId") or "unknown"
        run = ctx.getLocalProperty("sql.streaming.runId") or query  # this start of the query
        batch_id = self.spec.base + int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        store = self.spec.store()
        try:
            done = _asked(store, store.last_commit, self.spec.pipeline.consumer, batch_id,
                          "the request for its last commit") if store is not None else None
            if done is not None and done.batch_id >= batch_id:
                for _ in iterator:  # committed already: Spark ran the batch again
                    pass
                return HopMessage(writer=query)
            if store is not None:  # Spark finished the batch before: the store must hold it
                StoreBehind.unless_holding(store.describe(), self.spec.pipeline.consumer,
                                           done.batch_id if done else None,
                                           _seen(self.spec, batch_id), batch_id)
            first = next(iterator, None)
            batch = Batch(self.spec.pipeline.consumer, batch_id, store, None, query,
                          writer=f"{run}/{ctx.partitionId()}")
            with States(batch) as states:
                tasks: list[tuple[int, RowTask]] = []
                sinks = self.spec.sinks()
                for index, sink in enumerate(sinks):
                    if first is not None:
                        sink.pass_planned(_task_columns(first, index))
                    if sink.written_by_pass_done:  # its rows go to the driver's commit
                        tasks.append((index, sink.pass_task({})))
                    elif states.open(sink):
                        tasks.append((index, sink.pass_task(sink.pass_context())))
                sources: dict[int, set[int]] = {i: set() for i, sink in enumerate(sinks)
                                                if isinstance(sink, KafkaSink)}
                given = iter([] if first is None else [first])
                if self.spec.keyed and first is not None:
                    given, iterator = iter(keyed_task(
                        [first, *iterator], [state_column(i) for i in self.spec.keyed],
                        self.spec.pipeline.pid, ctx.partitionId(), batch_id,
                        f"hop {batch.consumer} batch {batch_id}")), iter([])
                rows = _watched(given, iterator, sources=sources)
                results = list(pass_task(tasks, 0)(rows))
                states.commit()
            return HopMessage(_ipc(results), list(batch.stages), query, True,
                              {i: sorted(parts) for i, parts in sources.items()})
        finally:
            if store is not None:
                store.client.close()

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Commit the batch whose tasks sent ``messages`` (on the driver, once they all
        succeeded)."""
        mine = [m for m in messages if isinstance(m, HopMessage)]
        batch_id = self.spec.base + batchId
        consumer = self.spec.pipeline.consumer
        _one_task_per_source(consumer, batch_id, mine)
        rows = [row for m in mine if m.written for row in _rows(m.results)]
        result = merge_results(rows, 0)
        if result.refused:
            raise StateError(f"hop {consumer} batch {batch_id}: {result.refused} rows that a "
                             "state cannot hold (a value no state takes); nothing of the batch "
                             "is committed")
        p = self.spec.pipeline
        report = BatchReport(p.stream.streamName, batch_id, filtering=p.filtering)
        query = mine[0].writer if mine else None
        others = [JoinedHop(j, None, self.spec.base, _seen(self.spec, batch_id))
                  for j in self.spec.joined]
        store = self.spec.store()
        try:
            batch = Batch(consumer, batch_id, store, None, query,
                          [s for m in mine for s in m.stages], _seen(self.spec, batch_id))
            if store is not None and not _asked(store, partial(store.admit, batch_id),
                                                consumer, batch_id, "its admission"):
                if batch.stages:
                    _asked(store, partial(store.stages.drop, [s.key for s in batch.stages]),
                           consumer, batch_id, "the clearing of its stages")
                for joined in others:  # the driver died between the commits
                    if joined.admit(batchId):
                        joined.commit(batchId, None, query)
                return
            for index, sink in enumerate(self.spec.sinks()):
                if sink.written_by_pass_done:  # e.g. Postgres: the rows and the batch id
                    _write_on_driver(sink, batch, result.states.get(index, {}),
                                     result.data.get(index, []))
            reads = SourceReads(p, None, self.spec.base) if reports_reads(p) and mine else None
            read = reads.batch(store, batch_id, query) \
                if reads is not None and store is not None else None
            todo = [joined for joined in others if joined.admit(batchId)]
            commit(batch, result.marks if read is None else read.marks)
            if reads is not None and store is not None:
                reads.forget_before(store, batch_id, query)
            for joined in todo:  # after this consumer's commit
                joined.commit(batchId, report, query)
        finally:
            if store is not None:
                store.client.close()
            for joined in others:
                joined.close()
        count_source(result if read is None else read, report)
        for index, step in enumerate(p.steps):
            report.written[step.query.insertInto.objectName] = result.states.get(
                index, {}).get("written", 0)
        log.info(report.line())

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed: what the others staged goes (the batch is run again)."""
        stages = [s.key for m in messages if isinstance(m, HopMessage) for s in m.stages]
        store = self.spec.store() if stages else None
        if store is not None:
            try:
                store.stages.drop(stages)
            finally:
                store.client.close()


class HopSink(DataSource):
    """The ``sqe-hop`` data source: a hop's states as a streaming sink (option ``hop``: the
    :meth:`HopSpec.dump` that :meth:`sqe.hop.Hop.sink_options` gives)."""

    @classmethod
    def name(cls) -> str:
        return "sqe-hop"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HopWriter(HopSpec.load(self.options["hop"]), schema)


def _write_on_driver(sink: Sink, batch: Batch, counts: dict[str, int], data: list[bytes]
                     ) -> None:
    """Write and commit a state whose :meth:`~state.sink.Sink.pass_done` writes the rows
    its tasks gave, unless it holds the batch already."""
    with States(batch) as states:
        if states.open(sink):
            sink.pass_done(counts, data)
            states.commit()


def _asked(store: HwmStore, call: Callable[[], T], consumer: str, batch_id: int,
           action: str) -> T:
    """``call`` to the HWM store, sent again on a new connection while the store is briefly
    away (``commitRetrySeconds``), as every call of the other ways is; a store away longer,
    or one that refuses, in one sentence."""
    return answered(store, call, f"batch {batch_id} of {consumer}", action,
                    f"cannot read the HWM store of {consumer}")


def _seen(spec: HopSpec, batch_id: int) -> int | None:
    """The batch the store must hold when batch ``batch_id`` runs: the one before, which Spark
    finished (SQE committed it first); None for the checkpoint's first batch, or where the
    operator accepts losing it."""
    seen = batch_id - 1
    return None if seen < spec.base or (spec.accepted is not None and seen <= spec.accepted) \
        else seen


def _task_columns(batch: pa.RecordBatch, index: int) -> list[str]:
    """The task columns of state ``index`` in the frame the sink was given."""
    column = state_column(index)
    if column not in batch.schema.names:
        return []
    return [f.name for f in batch.schema.field(column).type]


def _watched(*parts: Iterator[pa.RecordBatch], sources: dict[int, set[int]]
             ) -> Iterator[pa.RecordBatch]:
    """The batches of ``parts``, noting in ``sources`` the source partitions each Kafka
    state's rows come from (its carried partition)."""
    for part in parts:
        for batch in part:
            for index, seen in sources.items():
                column = batch.column(state_column(index))
                if isinstance(column, pa.StructArray) and column.null_count < len(column):
                    carried = pc.struct_field(column, CARRIED[1])
                    seen.update(v for v in pc.unique(carried.drop_null()).to_pylist())
            yield batch


def _one_task_per_source(consumer: str, batch_id: int, messages: Sequence[HopMessage]) -> None:
    """Fail the batch, before its commit, when a source partition's records reached a Kafka
    state from two tasks (the next hop's replay filter needs them in one, in order)."""
    seen: dict[tuple[int, int], int] = {}
    for task, m in enumerate(messages):
        for state, parts in m.sources.items():
            for part in parts:
                other = seen.setdefault((state, part), task)
                if other != task:
                    raise StateError(
                        f"hop {consumer} batch {batch_id}: the records of source partition "
                        f"{part} reached a Kafka state from two tasks, so they cannot keep "
                        "their source order; the transform shuffled them (a non-broadcast "
                        "join, a repartition): keep it row-wise, or broadcast what it joins")


def _ipc(batches: Sequence[pa.RecordBatch]) -> bytes:
    if not batches:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as out:
        for b in batches:
            out.write_batch(b)
    return bytes(sink.getvalue().to_pybytes())


def _rows(data: bytes) -> list[dict[str, Any]]:
    if not data:
        return []
    return list(pa.ipc.open_stream(data).read_all().to_pylist())
