"""A micro-batch of a hop written by the user's own PySpark code (:class:`sqe.hop.Hop`).

A hop is a stream whose queries are the user's function: Spark's ``foreachBatch`` gives it the
batch's rows (the ``sqe-kafka`` source's columns, with whatever the user's transform added),
and the function hands each of the hop's states its frame with :meth:`HopBatch.write`.
Everything around the function is the engine's own: the batch is admitted by
:class:`~sqe.engine.batch.processor.BatchProcessor` against the stores' commit record,
:class:`UserWay` runs the batch once (its rows cached for the function) and takes its new
high-water marks from what the source tasks read (:mod:`sqe.engine.batch.source_reads`), writes
each state through the sink protocol (:mod:`state.sink`) and commits the marks, the batch id
and the staged rows in one step, the batch protocol's steps (:mod:`sqe.engine.batch.protocol`)
as a topology's batch takes them.  The marks are the source's, not the rows', so the query
between the read and the states may be anything Structured Streaming runs: an aggregation, a
deduplication, a join.  A batch the stores hold already is still run through, writing nothing,
so that Spark's state store holds it (:class:`~sqe.engine.batch.processor.BatchProcessor`'s
``drain``).

What exactly-once asks of the user's code, checked here in one sentence each: a Kafka state
keys each row by the ``_sqe_*`` columns :meth:`sqe.hop.Hop.read` adds, so its frame keeps
them; each state is written once in every batch; a Kafka state's
rows stay in source order per source partition (a frame that a shuffle or a sort reordered is
put back in that order, with a warning; over Spark Connect, where no plan can be read, every
Kafka state's frame is), and a transform Spark knows to be non-deterministic is warned of (a
batch run again after a failure may write other rows than the first attempt).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from pyspark.sql import DataFrame

from sqe.engine.batch.keys import batch_keyed
from sqe.engine.batch.one_pass_batch import count_source
from sqe.engine.batch.per_batch import batch_marks, stage_counted, write_state
from sqe.engine.batch.pipeline import QueryStep, StreamPipeline
from sqe.engine.batch.protocol import States, commit
from sqe.engine.batch.source_reads import SourceReads
from sqe.engine.spark.spark_api import describe_jobs, is_connect
from sqe.errors import StateError
from sqe.observe.batch_report import BatchReport
from sqe.wire.columns import CARRIED, data_rows
from state.kafka.sink import KafkaSink
from state.sink import Batch, Staged

__all__ = ["HopBatch", "UserWay", "reorders"]

log = logging.getLogger("sqe")

#: The source columns by which a hop without an HWM store counts its batch's records.
_MARKED_BY = ("_offset", "_pid", "_source_partition", "_source_offset")
_KEEP = ("keep all three through a row-wise transform (select('*', ...) and withColumn keep "
         "them), or none: rows an aggregation made are keyed by batch")
#: A shuffle or a sort in a physical plan: what reorders the rows of a source partition.
_REORDERS = re.compile(r"\bExchange (?:hashpartitioning|rangepartitioning|RoundRobinPartitioning"
                       r"|SinglePartition)|\bSort \[")


def reorders(plan: str) -> bool:
    """Whether a physical plan's text has a shuffle or a sort (a broadcast is neither)."""
    return _REORDERS.search(plan) is not None


def _plans(frame: DataFrame, checkpoint: str | None) -> list[tuple[str, bool]]:
    """The physical plan's text and whether Spark knows the plan to be deterministic, of
    ``frame`` and of the batch of the streaming query on ``checkpoint`` being written
    (``foreachBatch`` gets that batch as rows Spark computed already, so its own plan does not
    show the streaming part); empty over Spark Connect, where the client cannot ask."""
    if is_connect(frame.sparkSession):
        return []
    plans = [cast(Any, frame)._jdf.queryExecution()]
    wanted = urlsplit(checkpoint).path.rstrip("/") if checkpoint else None
    # foreachBatch runs in the query's own clone of the session, whose manager holds no
    # query: the queries are the default session's
    jvm = cast(Any, frame.sparkSession)._jvm
    default = jvm.org.apache.spark.sql.SparkSession.getDefaultSession()
    for query in default.get().streams().active() if default.isDefined() else []:
        running = query.streamingQuery()
        if wanted and urlsplit(str(running.resolvedCheckpointRoot())).path.rstrip("/") == wanted:
            last = running.lastExecution()
            if last is not None:
                plans.append(last)
    return [(str(p.executedPlan().toString()), bool(p.analyzed().deterministic()))
            for p in plans]


class HopBatch(Protocol):
    """One micro-batch of a hop, as the user's function gets it (see :class:`sqe.Hop`)."""

    @property
    def id(self) -> int:
        """The batch's id, as the stores count it: the number to make the user's own writes
        idempotent by."""

    @property
    def consumer(self) -> str:
        """The hop's consumer (``<topology>.<stream>``)."""

    def write(self, state: str, frame: DataFrame) -> None:
        """Write ``frame`` to the hop's state named ``state`` (its ``objectName``), committed
        with the batch's high-water marks and id once the function returns; a state that
        holds this batch already (Spark ran it again) is not written twice."""


class _OpenBatch:
    """A :class:`HopBatch` being written: the states it opened and the rows they staged."""

    def __init__(self, way: UserWay, states: States) -> None:
        self._way = way
        self.states = states
        self.staged: list[Staged] = []
        self.written: set[str] = set()

    @property
    def id(self) -> int:
        return self.states.attempt.batch_id

    @property
    def consumer(self) -> str:
        return self._way.p.consumer

    def write(self, state: str, frame: DataFrame) -> None:
        step = self._way.step(state)
        if state in self.written:
            raise StateError(f"{self._where(state)}: written twice in one batch; give each "
                             "state one frame per batch (union them first)")
        self.written.add(state)
        assert step.sink is not None
        frame = self._way.fit(step, frame, self._where(state), self.id,
                              self.states.attempt.checkpoint)
        report = self.states.report
        assert report is not None  # UserWay opens its states with the batch's report
        self.staged += write_state(step, frame, self.states, report, self.name_jobs)

    def name_jobs(self, frame: DataFrame, what: str) -> None:
        """Name the Spark jobs started next (Spark's UI and event log show the name)."""
        describe_jobs(frame.sparkSession, f"sqe {self.consumer} batch {self.id}: {what}")

    def _where(self, state: str) -> str:
        return f"hop {self.consumer} batch {self.id}, state {state}"


class UserWay:
    """The way a hop's batch is written: the user's function instead of compiled queries."""

    def __init__(self, pipeline: StreamPipeline,
                 function: Callable[[DataFrame, HopBatch], Any],
                 reads: SourceReads | None = None) -> None:
        self.p = pipeline
        self.function = function
        self.reads = reads  # the batches' marks from what the source read (else from the rows)
        self._said: set[tuple[str, str]] = set()  # warnings said once per run: (state, what)

    def step(self, state: str) -> QueryStep:
        """The hop's step that writes ``state``."""
        for step in self.p.steps:
            if step.query.insertInto.objectName == state:
                return step
        names = ", ".join(s.query.insertInto.objectName for s in self.p.steps) or "none"
        raise StateError(f"hop {self.p.consumer}: it has no state {state} (its states: "
                         f"{names}); name each state in the hop's into=[...]")

    def fit(self, step: QueryStep, frame: DataFrame, where: str, batch_id: int,
            checkpoint: str | None = None) -> DataFrame:
        """``frame`` as ``step``'s state takes it: its fields present, and for a Kafka state
        the carried columns, in source order per source partition (put back in it where a
        plan shows a shuffle or a sort, and over Spark Connect, where no plan can be read;
        ``checkpoint``: the streaming query's), or, for rows with none of the carried columns
        (an aggregation's), keys of batch ``batch_id`` (:mod:`sqe.engine.batch.keys`)."""
        fields = step.query.insertInto.fields
        lower = {c.lower() for c in frame.columns}
        missing = [f for f in fields if f.lower() not in lower]
        if missing:
            raise StateError(f"{where}: the frame has no column {', '.join(missing)} of the "
                             f"state's fields {', '.join(fields)}")
        frame = step.with_state_columns(frame)
        if not isinstance(step.sink, KafkaSink):
            return frame
        lost = [c for c in CARRIED if c not in frame.columns]
        if lost and len(lost) < len(CARRIED):
            raise StateError(f"{where}: a Kafka state keys each row by the columns "
                             f"{', '.join(CARRIED)} that Hop.read gives, and the frame has no "
                             f"{', '.join(lost)}; {_KEEP}")
        plans = _plans(frame, checkpoint)
        if not all(deterministic for _, deterministic in plans):
            self._warn(where, "random", "its frame is not deterministic (rand(), uuid(), a "
                       "UDF marked nondeterministic, ...): a batch run again after a failure "
                       "may write other rows than the first attempt, and the next hop keeps "
                       "the first attempt's rows of each source offset")
        if lost:  # rows no single record stands behind: keyed by the batch
            return batch_keyed(frame, self.p.pid, batch_id, where)
        if not plans or any(reorders(text) for text, _ in plans):
            if plans:
                self._warn(where, "order", "its frame is shuffled or sorted after the read, "
                           "which breaks the source order the next hop's replay filter needs; "
                           "SQE repartitions it by source partition and sorts it by source "
                           "offset (a shuffle per batch): keep the transform row-wise, or "
                           "broadcast the table it joins, to avoid it")
            frame = frame.repartition(CARRIED[1]).sortWithinPartitions(CARRIED[1], CARRIED[2])
        return frame

    def _warn(self, where: str, what: str, text: str) -> None:
        state = where.rsplit("state ", 1)[-1]
        if (state, what) not in self._said:
            self._said.add((state, what))
            log.warning(f"warning: hop {self.p.consumer}, state {state}: {text}")

    def __call__(self, rows: DataFrame, batch: Batch, report: BatchReport) -> bool:
        """Write and commit batch ``rows`` through the user's function (always True)."""
        where = f"hop {self.p.consumer} batch {batch.batch_id}"
        reads = self.reads if batch.store is not None else None
        if batch.store is not None and reads is None:
            raise StateError(f"{where}: its source does not report what it read (reportRead), "
                             "by which the batch's high-water marks are found")
        frame = rows.persist()
        attempt = replace(batch, stages=[])
        try:
            with States(attempt, report) as states:
                out = _OpenBatch(self, states)
                if reads is not None and batch.store is not None:
                    out.name_jobs(frame, "read the batch")
                    frame.count()  # every source task runs (and reports), the rows are cached
                    read = reads.batch(batch.store, batch.batch_id)
                    count_source(read, report)
                    updates = read.marks
                elif all(c in frame.columns for c in _MARKED_BY):  # no marks: count the records
                    out.name_jobs(frame, "count the records")
                    updates, _, _ = batch_marks(frame, report)
                else:
                    updates = {}
                self.function(data_rows(frame) if frame.columns.count("_offset") == 1
                              else frame, out)
                unwritten = [s.query.insertInto.objectName for s in self.p.steps
                             if s.query.insertInto.objectName not in out.written]
                if unwritten:
                    raise StateError(f"{where}: the function wrote no frame to state "
                                     f"{', '.join(unwritten)}; write each of the hop's states "
                                     "in every batch (a frame with no row when it has none), "
                                     "so that every store records every batch")
                stage_counted(out.staged, report, frame, out.name_jobs)
                states.commit()
        finally:
            frame.unpersist()
        commit(attempt, updates)
        if reads is not None and batch.store is not None:
            reads.forget_before(batch.store, batch.batch_id)
        return True
