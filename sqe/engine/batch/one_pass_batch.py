"""The driver's part of a one-pass batch (:mod:`sqe.engine.batch.one_pass`): open the states, run the
batch's one Spark job, count, and commit.

:class:`OnePassWay` follows the batch protocol (:mod:`sqe.engine.batch.protocol`) as the
per-batch way does -- each state opened, written and committed, then the HWM commit of the
marks, the batch id and the staged rows in one step -- with the write being every state's
:meth:`~state.sink.Sink.pass_task` inside the one job (:mod:`sqe.engine.batch.one_pass_task`).
It returns False, having committed nothing, when the batch needs the per-batch way: a value
the deserializer cannot read, or a row a query or state fails on (that way finds the record
and applies the bad-record policy).  What tasks
wrote before then is written again by that way: Kafka records as replays the next hop drops,
staged rows under the same stage keys, Redis commands idempotently.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame

from sqe.engine.batch.bad_records import row_level, spark_reason
from sqe.engine.batch.commit import Applier
from sqe.engine.batch.one_pass import OnePassPlan
from sqe.engine.batch.one_pass_task import RESULT_SCHEMA, PassResult, merge_results, pass_task
from sqe.engine.batch.protocol import States, commit
from sqe.engine.spark.spark_api import give_tasks
from sqe.observe.batch_report import BatchReport
from sqe.source.read_report import BatchRead
from state.sink import Batch, Sink

__all__ = ["OnePassWay", "count_source"]

log = logging.getLogger("sqe")


class OnePassWay:
    """The one-pass way of a stream planned once (``plan``); ``name_jobs`` names the Spark
    jobs started next; ``applier`` applies each committed batch's rows in the background
    (:func:`~sqe.engine.batch.commit.commit_hwm`)."""

    def __init__(self, plan: OnePassPlan, name_jobs: Callable[[DataFrame, str], None],
                 applier: Applier | None = None) -> None:
        self.plan = plan
        self.name_jobs = name_jobs
        self.applier = applier

    def __call__(self, frame: DataFrame, batch: Batch, report: BatchReport) -> bool:
        """Write and commit batch ``frame`` in one Spark job, counting into ``report``; False:
        it needs the per-batch way, and nothing of it is committed."""
        plan, name_jobs = self.plan, self.name_jobs
        attempt = replace(batch, stages=[])
        with States(attempt, report) as states:
            written: list[tuple[int, Sink, dict[str, Any]]] = []  # index, sink, its context
            for index, step in plan.states:
                sink = step.sink
                assert sink is not None
                if states.open(sink, step.query.insertInto.objectName):
                    written.append((index, sink, sink.pass_context()))
            name_jobs(frame, "read, run the queries and write " + ", ".join(
                s.describe() for s in states.sinks) if states.sinks else "read")
            try:
                if plan.tasks is not None:  # planned with its task: the frame is the task's output
                    give_tasks(frame.sparkSession, plan.key,
                               json.dumps({str(i): context for i, _, context in written}))
                    rows = frame.collect()
                else:
                    tasks = [(i, sink.pass_task(context)) for i, sink, context in written]
                    rows = frame.mapInArrow(pass_task(tasks, len(plan.warnings)),
                                            RESULT_SCHEMA).collect()
            except CapturedException as exc:
                if not row_level(exc):
                    raise
                said = spark_reason(exc)
                behind = "" if said.startswith("sqe.errors.") else \
                    ", which finds the record behind it"  # not a store's failure: a value's
                log.warning(f"warning: {attempt.consumer} batch {attempt.batch_id}: its one pass "
                            f"failed ({said}); it is written again the per-batch way{behind}")
                return False
            result = merge_results(rows, len(plan.warnings))
            if result.refused:
                return False
            _count(plan, result, report)
            states.commit()
        commit(attempt, result.marks, self.applier)
        return True


def count_source(result: PassResult | BatchRead, report: BatchReport) -> None:
    """What the one-pass tasks read (``result``: records, replays, counters) into ``report``."""
    report.source.add(result.tally)
    report.records_read += (result.records + result.tally.replays_dropped
                            + result.tally.keys_beyond_bound)
    report.replays_dropped += result.tally.replays_dropped
    report.unparseable_keys += result.unparseable_keys


def _count(plan: OnePassPlan, result: PassResult, report: BatchReport) -> None:
    """``result``'s counts into ``report``, and each state's rows written."""
    count_source(result, report)
    report.warnings.clear()
    for name, count in zip(plan.warnings, result.warnings, strict=True):
        report.warnings[name] = report.warnings.get(name, 0) + count
    for index, step in plan.states:
        name = step.query.insertInto.objectName
        if name in report.already_written:
            continue
        assert step.sink is not None
        report.written[name] = step.sink.pass_done(result.states.get(index, {}),
                                                   result.data.get(index, []))
