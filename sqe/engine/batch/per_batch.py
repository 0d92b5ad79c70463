"""The per-batch way of writing a micro-batch: its DataFrames built on the driver for it.

The way every batch of a stream goes that cannot be planned once (:mod:`sqe.engine.batch.one_pass`:
JSON types inferred per batch, aggregating queries, intermediate streams, FIXED streams,
Spark's own connector), and the way a one-pass batch goes when it needs to (a record it
cannot take).  A :class:`PerBatchWay`, for batch ``K`` admitted by
:class:`~sqe.engine.batch.processor.BatchProcessor`:

1. drop replays (done in the source's ``read()``; for Spark's own connector by
   :func:`~sqe.source.replay.filter_replays_frame` here);
2. one Spark job over the cached batch: count what the source read, find the new
   high-water marks and what the deserializer needs (the JSON values' schema);
3. stamp each record with its StreamMetadata (pid, source partition and offset),
   deserialize (on the first batch with JSON records, a field the queries read that no
   record holds stops the run, naming the closest key), run the queries in file order
   and write each query's state through its sink (:mod:`state.sink`);
4. commit: every sink's part, then the new HWMs with batch id ``K`` (and the rows
   the sinks staged) in one atomic step; close the sinks -- the steps of the batch protocol
   (:mod:`sqe.engine.batch.protocol`).

A batch that fails on a record finds it (:mod:`sqe.engine.batch.bad_records`) and, by the stream's
bad-record policy, fails naming it or dead-letters it and runs again without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import reduce

from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from sqe.engine.batch.bad_records import (
    MAX_BAD_RECORDS,
    BadRecord,
    StepFailure,
    apply_policy,
    bad_rows,
    locate,
    records_at,
    row_level,
    spark_reason,
    without,
)
from sqe.engine.batch.pipeline import QueryStep, StreamPipeline, check_fields
from sqe.engine.batch.protocol import States, commit
from sqe.errors import StaleBatchError, StateError
from sqe.faults import fault_point
from sqe.lang.compiler import compile_query
from sqe.ledger.hwm import HwmStore
from sqe.observe.batch_report import BatchReport
from sqe.source.deserializers import Deserialized, Summary, deserialize, summary_columns
from sqe.source.marks import frame_marks
from sqe.source.replay import beyond_bound_frame, beyond_bound_reason, filter_replays_frame
from sqe.wire.columns import CARRIED, TALLY, Tally, carried_offset, data_rows
from state.sink import Batch, Staged, stage_together

__all__ = ["PerBatchWay", "batch_marks", "stage_counted", "write_state"]

log = logging.getLogger("sqe")


#: How many times one batch is run again without the bad records found in it.
_MAX_ATTEMPTS = 20


class _Rejected(Exception):
    """Records found before anything was written (values that do not decode)."""

    def __init__(self, bad: list[BadRecord]) -> None:
        super().__init__(f"{len(bad)} bad records")
        self.bad = bad


def batch_marks(frame: DataFrame, report: BatchReport, extra: Sequence[Column] = ()
                ) -> tuple[dict[tuple[int, int], int], int, list[Row]]:
    """One Spark job over a batch's source rows (``frame``: the source's columns; a counter
    column it lacks counts 0): its counters added to ``report``, the new high-water mark of
    each (pid, source partition) it holds, how many record rows it holds, and the groups'
    rows (with the ``extra`` aggregates)."""
    have = set(frame.columns)
    groups = (frame.groupBy("_pid", "_source_partition")
              .agg(F.count("_offset").alias("n"), F.max("_source_offset").alias("hi"),
                   *[(F.sum(c) if c in have else F.lit(0)).alias(c) for c in TALLY], *extra)
              .collect())
    updates, kept = {}, 0
    for g in groups:
        kept += g["n"]
        counts = Tally.from_row(g)
        report.source.add(counts)
        report.records_read += g["n"] + counts.replays_dropped + counts.keys_beyond_bound
        report.replays_dropped += counts.replays_dropped
        if g["_pid"] is None:
            report.unparseable_keys += g["n"]
        elif g["hi"] is not None:
            updates[(g["_pid"], g["_source_partition"])] = g["hi"]
    return updates, kept, groups


def write_state(step: QueryStep, frame: DataFrame, states: States, report: BatchReport,
                name_jobs: Callable[[DataFrame, str], None], empty: bool = False
                ) -> list[Staged]:
    """Open the step's state among ``states`` and write ``frame`` to it (``empty``: it has no
    row), or return the rows it stages (written with the other states' staged rows in one
    job, :func:`stage_counted`); a state that holds the batch already writes nothing."""
    sink = step.sink
    assert sink is not None
    name = step.query.insertInto.objectName
    name_jobs(frame, f"write {sink.describe()}")
    if sink.merges and name not in report.merged:  # once, however often the batch is tried
        report.merged.append(name)
    if not states.open(sink, name):
        return []
    staged = None if empty else sink.staged(frame)
    if staged is not None:
        return [staged]
    report.written[name] = sink.write_empty(frame) if empty else sink.write(frame)
    return []


def stage_counted(staged: Sequence[Staged], report: BatchReport, frame: DataFrame,
                  name_jobs: Callable[[DataFrame, str], None]) -> None:
    """Every state's staged rows, one Spark job per store (named over ``frame``), and the
    rows each staged into ``report`` (after the crash point ``before-stage``: the states are
    open, their stages empty)."""
    if not staged:
        return
    fault_point("before-stage", report.batch_id)
    name_jobs(frame, "stage " + ", ".join(s.name for s in staged))
    written = stage_together(staged)
    for item in staged:
        report.written[item.name] = written.get(item.key, 0)


class PerBatchWay:
    """The per-batch way of one stream's batches (see the module docstring)."""

    def __init__(self, pipeline: StreamPipeline, name_jobs: Callable[[DataFrame, str], None]
                 ) -> None:
        self.p = pipeline
        self.name_jobs = name_jobs  # names the Spark jobs started next
        self._fields_checked = False  # the JSON fields the queries read were looked for
        self._types: dict[str, str] | None = None  # the JSON fields of the batch being written
        #: the JSON keys the last batch written held, with their inferred types
        self.inferred: tuple[tuple[str, str], ...] | None = None

    def _deserializer(self) -> tuple[str | None, dict[str, str | None] | None]:
        """The stream's deserializer and its declared fields."""
        fixed = self.p.fixed is not None
        return ("json", None) if fixed else (self.p.stream.deserializer,
                                             self.p.settings.declared_fields)

    def _read(self, frame: DataFrame, store: HwmStore | None, report: BatchReport
              ) -> tuple[DataFrame, dict[tuple[int, int], int], int, Summary | None]:
        """The batch's record rows (replays dropped), counted into ``report``, the new
        high-water marks of the (pid, partition) groups it holds, how many rows it holds, and
        what its deserializer needs to know of it (one job for all of it)."""
        self.name_jobs(frame, "read, count and find the new high-water marks")
        if self.p.native and store is not None:
            rows = data_rows(frame)
            before = rows.count()
            hwm = frame_marks(rows, store)
            bound = self.p.settings.max_advance
            beyond = bad_rows(beyond_bound_frame(rows, hwm, bound), F.lit(True),
                              F.lit(beyond_bound_reason(bound)), MAX_BAD_RECORDS + 1)
            report.source.keys_beyond_bound += len(beyond)
            report.source.dead_letters += apply_policy(self.p.settings, beyond)
            filtered = filter_replays_frame(rows, hwm, bound).persist()
            report.replays_dropped = before - len(beyond) - filtered.count()
            report.records_read = report.replays_dropped + len(beyond)
            frame.unpersist()
            frame = filtered
        summing = summary_columns(*self._deserializer())
        updates, kept, groups = batch_marks(frame, report, summing)
        return frame, updates, kept, Summary.of_groups(groups) if summing else None

    def __call__(self, rows: DataFrame, batch: Batch, report: BatchReport) -> bool:
        """Write and commit batch ``rows`` (the source's rows), counting into ``report``
        (always True: this way takes every batch)."""
        self.inferred = None
        frame = rows.persist()
        try:
            frame, updates, kept, summary = self._read(frame, batch.store, report)
            # Replays only, or nothing: every later step runs on no rows, and a frame Spark
            # knows to be empty starts no job over the batch's cache.
            rows_of = frame if kept else frame.limit(0)
            excluded: list[BadRecord] = []
            for _ in range(_MAX_ATTEMPTS):  # once, unless records are dead-lettered
                attempt = replace(batch, stages=[])
                try:
                    self._attempt(without(data_rows(rows_of), excluded), attempt, report,
                                  empty=not kept, summary=None if excluded else summary)
                    break
                except _Rejected as rejected:
                    bad = rejected.bad
                except Exception as exc:
                    bad = self._diagnose(exc, without(data_rows(rows_of), excluded), report)
                report.source.dead_letters += apply_policy(self.p.settings, bad)
                excluded += bad
            else:
                raise StateError(f"{self.p.stream.streamName} batch {batch.batch_id}: still "
                                 f"failing after {len(excluded)} bad records were dead-lettered "
                                 f"in {_MAX_ATTEMPTS} attempts; nothing of it is committed")
            if excluded:  # a dead-lettered record moves no mark
                updates = {(g[0], g[1]): g[2] for g in without(data_rows(frame), excluded)
                           .where(F.col("_pid").isNotNull()).groupBy("_pid", "_source_partition")
                           .agg(F.max("_source_offset")).collect() if g[2] is not None}
            commit(attempt, updates)
        finally:
            frame.unpersist()
        return True

    def _frames(self, rows: DataFrame, report: BatchReport | None,
                types: dict[str, str] | None = None, empty: bool = False,
                summary: Summary | None = None) -> tuple[Deserialized, list[DataFrame]]:
        """The batch's rows deserialized, and the frame each query's state is given (lazy).
        ``types``: read JSON fields as these types (part of a batch read as the whole was);
        ``empty``: ``rows`` is known to hold no row (no JSON field is looked for);
        ``summary``: what the deserializer needs to know of ``rows``, known already."""
        stamped = rows.select(
            "*", F.lit(self.p.pid).cast("long").alias(CARRIED[0]),
            F.col("_partition").alias(CARRIED[1]), carried_offset().alias(CARRIED[2]))
        kind, declared = self._deserializer()
        self.name_jobs(rows, f"deserialize ({kind})")
        des = deserialize(stamped, kind, self.p.wanted_fields, types or declared, empty=empty,
                          summary=None if types else summary)
        frames = {self.p.stream.streamName: des.frame}
        out = []
        for step in self.p.steps:
            compiled = compile_query(step.query, frames[step.query.from_.objectName],
                                     step.where)
            frames[step.query.insertInto.objectName] = compiled.frame
            if report is not None:
                for name, count in compiled.warning_counts().items():
                    report.warnings[name] = report.warnings.get(name, 0) + count
            out.append(step.with_state_columns(compiled.frame))
        return des, out

    def _attempt(self, rows: DataFrame, batch: Batch, report: BatchReport,
                 empty: bool = False, summary: Summary | None = None) -> None:
        """Deserialize, run the queries and write every state; commit the states' parts.
        ``empty`` and ``summary``: as :meth:`_frames`'s."""
        report.warnings.clear()
        des, frames = self._frames(rows, report, empty=empty, summary=summary)
        if (self.p.fixed is None and self.p.stream.deserializer == "json"
                and self.p.settings.declared_fields is None):
            self._check_fields(des)
        report.unparseable_values = des.unparseable_values
        if des.unparseable_values and des.undecodable is not None:
            raise _Rejected(bad_rows(des.frame, des.undecodable, F.lit(
                f"the value is not a JSON object (stream {self.p.stream.streamName}, "
                "deserializer json)"), MAX_BAD_RECORDS + 1))
        self._types = dict(des.types)
        self.inferred = des.inferred if self.p.learns and not empty else None
        if self.p.settings.bad_record_policy == "deadletter":
            self._evaluate(rows)  # every query computes and every state can hold it: no record
            #                       is written by one query and dead-lettered by a later one
        staged: list[Staged] = []
        with States(batch, report) as states:
            for step, frame in zip(self.p.steps, frames, strict=True):
                if step.sink is not None:
                    staged += write_state(step, frame, states, report, self.name_jobs, empty)
            stage_counted(staged, report, frames[0], self.name_jobs)
            states.commit()

    def _diagnose(self, exc: Exception, rows: DataFrame, report: BatchReport
                  ) -> list[BadRecord]:
        """The records behind a failed batch (found by :func:`locate`); none found: ``exc``
        stands, as a sentence where it is Spark's."""
        if not (row_level(exc) or isinstance(exc, (StateError, StepFailure))) or isinstance(
                exc, StaleBatchError):
            raise exc
        limit = 1 if self.p.settings.bad_record_policy == "fail" else MAX_BAD_RECORDS + 1
        known = exc if isinstance(exc, StepFailure) else None  # _evaluate failed on rows
        bad = self._rejected(rows, limit) or locate(rows, self._evaluate, limit, known)
        if bad:
            return bad
        if row_level(exc) or isinstance(exc, StepFailure):
            reason = str(exc) if isinstance(exc, StepFailure) else spark_reason(exc)
            raise StateError(f"{self.p.stream.streamName} batch {report.batch_id}: {reason} "
                             "(no single record causes it); nothing of the batch is "
                             "committed") from None
        raise exc

    def _rejected(self, rows: DataFrame, limit: int) -> list[BadRecord]:
        """The records whose rows a state cannot hold, read through the carried StreamMetadata
        of its query's output (one job per condition; none for aggregated output)."""
        _, frames = self._frames(rows, None, self._types)
        for step, frame in zip(self.p.steps, frames, strict=True):
            if step.sink is None or not set(CARRIED) <= set(frame.columns):
                continue
            for condition, reason in step.sink.rejects(frame):
                ids = [(r[0], r[1]) for r in frame.where(condition)
                       .select(CARRIED[1], CARRIED[2]).limit(limit).collect()]
                if ids:
                    return records_at(rows, ids, f"{step.where}: {reason}", limit)
        return []

    def _evaluate(self, rows: DataFrame) -> None:
        """Run every query over ``rows`` and check what each state is given, writing nothing;
        a :class:`StepFailure` names the step that cannot take them."""
        _, frames = self._frames(rows, None, self._types)
        for step, frame in zip(self.p.steps, frames, strict=True):
            if step.sink is None:
                continue
            self.name_jobs(frame, f"evaluate for {step.sink.describe()}")
            try:
                frame.write.format("noop").mode("overwrite").save()
                rejects = step.sink.rejects(frame)
                if not rejects or not frame.where(
                        reduce(lambda a, b: a | b, [c for c, _ in rejects])).limit(1).count():
                    continue
                for condition, reason in rejects:
                    if frame.where(condition).limit(1).count():
                        raise StepFailure(step.where, reason)
            except CapturedException as exc:
                if not row_level(exc):
                    raise
                raise StepFailure(step.where, spark_reason(exc)) from None

    def _check_fields(self, des: Deserialized) -> None:
        """On the first batch with JSON records, a field the queries read that none holds
        stops the run before anything is written (its name is likely misspelt)."""
        if self._fields_checked or not des.present:
            return
        self._fields_checked = True
        check_fields(self.p, des.present, des.missing)
