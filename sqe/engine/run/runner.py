"""Running a planned topology on Spark Structured Streaming: one streaming query per stream.

:func:`run_topology` builds the pipelines (:mod:`sqe.engine.batch.pipeline`), starts one
streaming query per ``CreateStream`` with its source and checkpoint
(``<checkpoint>/<streamName>``), runs each micro-batch through a
:class:`~sqe.engine.batch.processor.BatchProcessor`, and waits until the queries are done
(``once``: Spark's AvailableNow trigger), a ``runtime`` has passed, or forever.
A run holds its checkpoint while it runs (:mod:`sqe.engine.run.lock`), and each stream
starts where its checkpoint and its stores agree (:mod:`sqe.engine.run.recovery`).  A
failed query stops the others and is raised as one sentence
(:func:`~sqe.engine.run.failure.describe_failure`); a requested stop lets the batch being written finish
and says where each stream stopped.  For the ``sqe-kafka`` source, every batch's
counters are also observed metrics ``sqe.<stream>`` in the streaming query progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import redis
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from sqe.clients.redis_endpoint import persistence_warning
from sqe.config.plan import TopologyPlan
from sqe.engine.batch.pipeline import StreamPipeline, build_pipelines
from sqe.engine.batch.processor import BatchProcessor
from sqe.engine.batch.stream_frame import learns_types, planned_once, source_frame, with_learned_types
from sqe.engine.run.changes import review, write_records
from sqe.engine.run.failure import describe_failure
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.run.query_starts import QueryStarts, start_query
from sqe.engine.run.recovery import Rerun
from sqe.engine.run.replans import Replans, fresh_states
from sqe.engine.run.start import PreparedStream, default_rerun, prepare_stream
from sqe.engine.run.triggers import TriggerTimes, trigger_kwargs
from sqe.engine.spark.checkpoint import (
    CheckpointFiles,
    StreamCheckpoint,
    local_checkpoint,
    use_file_system_manager,
)
from sqe.engine.spark.connect_session import abandon, server_lost
from sqe.engine.spark.planner_python import bridge_planner_python
from sqe.engine.spark.spark_api import driver_directory, is_connect, python_exec
from sqe.errors import RunError, RunStopped, SqeError
from sqe.observe.batch_report import BatchReport, partition_offsets
from sqe.observe.progress import ProgressLog, progress_path
from sqe.observe.progress_follow import ProgressFollower
from sqe.observe.watch import RunWatcher, StreamView, Watchers
from sqe.source.admission import limits_note

__all__ = ["KEPT_REPORTS", "Mode", "persistence_warnings", "run_topology"]

log = logging.getLogger("sqe")

Mode = Literal["once", "runtime", "forever"]

#: How many batch reports a run in ``forever`` mode keeps (the last ones).
KEPT_REPORTS = 1000


def persistence_warnings(pipelines: list[StreamPipeline]) -> list[str]:
    """Why the HWM stores of ``pipelines`` would lose their marks on a restart (one line each)."""
    out: list[str] = []
    seen: set[str] = set()
    for p in pipelines:
        if not p.filtering or p.settings.hwm_store.display in seen:
            continue
        endpoint = p.settings.hwm_store
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


def _starter(writer: DataStreamWriter, name: str,
             connect: bool) -> Callable[[], StreamingQuery]:
    """What starts (and starts again) the query of ``writer``."""
    return (lambda: start_query(writer, name)) if connect else writer.start


def _await(query: StreamingQuery, seconds: int) -> None:
    """Wait up to ``seconds`` for ``query`` to end; its failure is left to the next check
    (:meth:`QueryStarts.check`), which may start it again."""
    try:
        query.awaitTermination(seconds)
    except (PySparkException, Py4JError):
        if query.isActive or query.exception() is None:
            raise


def _view(topology: str, s: PreparedStream) -> StreamView:
    """What the run's watchers are told of stream ``s`` as it starts."""
    p, done = s.pipeline, s.checkpoint.last_committed()
    return StreamView(topology, p.stream.streamName, p.consumer,
                      p.source.topic if p.source is not None else None,
                      partition_offsets(s.checkpoint.end_offsets(done)) if done is not None
                      else None)


def _stopped(streams: list[PreparedStream]) -> str:
    """Where each stream stopped, and where its next run starts."""
    parts = []
    for s in streams:
        done = s.checkpoint.last_committed()
        name = s.pipeline.stream.streamName
        if done is None:
            parts.append(f"{name} before its first batch (the next run starts at "
                         "startingOffsets)")
        else:
            parts.append(f"{name} after batch {s.base + done} (the next run starts at offsets "
                         f"{s.checkpoint.end_offsets(done)})")
    return "stopped: " + "; ".join(parts)


def _wait_idle(processors: list[BatchProcessor], queries: list[StreamingQuery],
               seconds: float) -> None:
    """Let a batch that is being written finish, for up to ``seconds`` (over Spark Connect
    the batches run on the server, and the queries' status says whether one does)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (
            any(p.busy for p in processors)
            or any(q.isActive and q.status.get("isTriggerActive") for q in queries)):
        time.sleep(0.1)


def run_topology(plan: TopologyPlan, spark: SparkSession, name: str, checkpoint: str | Path,
                 mode: Mode = "forever", runtime: float | None = None,
                 on_start: Callable[[list[StreamingQuery]], None] | None = None,
                 resume: bool = False, rerun: Rerun | None = None,
                 stop: threading.Event | None = None,
                 watchers: Sequence[RunWatcher] = (), adopt_layout: bool = False,
                 accept_lost_marks: int | None = None) -> list[BatchReport]:
    """Run every stream of ``plan`` until done (``once``), ``runtime`` seconds, or forever.

    The run holds its checkpoint (:mod:`sqe.engine.run.lock`) and starts each stream where its
    checkpoint and stores agree (:mod:`sqe.engine.run.recovery`; ``resume``: from the offsets
    the stores recorded, on an empty checkpoint; ``rerun`` formats the commands a refusal
    names; an HWM store behind the checkpoint is refused unless ``accept_lost_marks`` is the
    last batch the checkpoint recorded committed there).  A topology changed since its
    checkpoint last ran is held against what ran (:mod:`sqe.engine.run.changes`; ``adopt_layout``:
    its Kafka states take their topics' partition counts and their new partitioners, key types
    and chunking, once their readers caught up).
    Returns the batch reports (a run in ``forever`` mode keeps the last
    :data:`KEPT_REPORTS`); a failed query raises :class:`RunError` after
    stopping the others; ``stop`` set ends the run after the batch being written, with
    :class:`RunStopped` saying where each stream stopped.  ``watchers`` are told the run's
    streams, each batch and each ``sqe-kafka`` stream's backlog (:mod:`sqe.observe.watch`).
    """
    if "spark.sql.session.timeZone" not in plan.spark_conf:
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # SQE's dates are UTC
    root = local_checkpoint(spark, str(checkpoint))
    if is_connect(spark) and progress_path(root) is None:
        raise RunError(f"checkpoint {root}: over Spark Connect, the checkpoint must be a path "
                       "that this machine and the server share (a local server, or a shared "
                       "mount): the batches, which run on the server, report to the run "
                       "through its progress file, and the run reads the checkpoint to start")
    use_file_system_manager(spark, root)
    lock = CheckpointLock(CheckpointFiles(spark, root))
    lock.acquire()
    undo = None
    try:  # the driver's planner of SQE's source starts the executors' Python path too
        python, where = python_exec(spark), driver_directory(spark)
        if python is not None and where is not None:
            undo = bridge_planner_python(python, where)
        return _run(plan, spark, name, root, mode, runtime, on_start, resume,
                    rerun or default_rerun(plan), stop, watchers, adopt_layout, lock,
                    accept_lost_marks)
    finally:
        if undo is not None:
            undo()
        lock.release()


def _run(plan: TopologyPlan, spark: SparkSession, name: str, root: str, mode: Mode,
         runtime: float | None, on_start: Callable[[list[StreamingQuery]], None] | None,
         resume: bool, rerun: Rerun, stop: threading.Event | None,
         watchers: Sequence[RunWatcher], adopt_layout: bool,
         lock: CheckpointLock, accept_lost: int | None) -> list[BatchReport]:
    pipelines = [replace(p, source=replace(p.source, cap_first=True))  # not AvailableNow
                 if mode != "once" and p.source is not None else p
                 for p in build_pipelines(plan, name)]
    if (note := limits_note(any(p.settings.max_records for p in pipelines))) is not None:
        log.warning(f"note: {note}")
    for warning in persistence_warnings(pipelines):
        log.warning(f"warning: {warning}")
    files = CheckpointFiles(spark, root)
    checkpoints = {p.stream.streamName: StreamCheckpoint(spark, f"{root}/{p.stream.streamName}")
                   for p in pipelines}
    found = review(files, pipelines, checkpoints, adopt_layout, lambda p: p.stores.hwm_commit())
    for warning in found.warnings:
        log.warning(f"warning: {warning}")
    for note in found.notes:
        log.info(note)
    streams = [prepare_stream(p, checkpoints[p.stream.streamName], resume, rerun, accept_lost)
               for p in pipelines]
    write_records(files, pipelines, found)
    hub = Watchers(watchers, {s.pipeline.stream.streamName: s.pipeline.source for s in streams
                              if s.pipeline.source is not None})
    # a run until stopped keeps its last reports only (all of them grew the driver,
    # bench/results/soak.md)
    reports: deque[BatchReport] = deque(maxlen=KEPT_REPORTS if mode == "forever" else None)
    processors: list[BatchProcessor] = []
    queries: list[StreamingQuery] = []
    where = progress_path(root)
    progress = ProgressLog(where, name) if where is not None else None
    follower = None

    def done(report: BatchReport) -> None:  # a stream's batch committed (or was skipped)
        reports.append(report)
        if progress is not None and follower is None:
            progress.append(report)
        hub.batch_done(report)
    if is_connect(spark) and progress is not None and where is not None:
        # foreachBatch runs on the server: its reports come back through the progress file
        def reported(report: BatchReport) -> None:  # the line the server's batch logged there
            log.info(report.line())
            done(report)
        follower = ProgressFollower(where, progress.run, reported)
        follower.start()
    starts = QueryStarts(queries)
    learned = threading.Event()  # a stream's batch learned types its plan does not read

    def launch(s: PreparedStream, p: StreamPipeline, learning: bool
               ) -> tuple[BatchProcessor, str, Callable[[], StreamingQuery]]:
        frame = source_frame(spark, p)
        one = planned_once(p, frame)
        proc = BatchProcessor(p, progress.append if follower and progress else done,
                              s.checkpoint, s.base, one, learning=learning,
                              on_learned=learned.set)
        query_name = f"{name}.{p.stream.streamName}"
        writer = ((one.stream if one is not None else frame).writeStream
                  .queryName(query_name)
                  .option("checkpointLocation", s.checkpoint.location)
                  .foreachBatch(proc))
        trigger = trigger_kwargs(mode, p.settings.trigger_interval)
        writer = writer.trigger(**trigger) if trigger else writer
        return proc, query_name, _starter(writer, query_name, is_connect(spark))

    try:
        hub.started([_view(name, s) for s in streams])
        for s in streams:
            learning = learns_types(s.pipeline)
            proc, query_name, starter = launch(
                s, with_learned_types(s.pipeline, s.checkpoint) if learning else s.pipeline,
                learning)
            processors.append(proc)
            starts.start(query_name, starter)
        replans = Replans(launch, streams, processors, starts,
                          lambda p: fresh_states(p, build_pipelines(plan, name)))
        if on_start is not None:
            on_start(queries)
        deadline = time.monotonic() + runtime if (mode == "runtime" and runtime) else None
        timing = TriggerTimes()
        while True:
            starts.check()
            timing.log_new(queries)
            if mode != "once":  # a run of what is there now: its next run starts planned
                replans.check()
            if lock.taken_over is not None:  # another run writes the checkpoint now
                raise RunError(lock.taken_over)
            if stop is not None and stop.is_set():
                _wait_idle(processors, queries, 60.0)
                for q in queries:
                    q.stop()
                raise RunStopped(_stopped(streams))
            active = [q for q in queries if q.isActive]
            if not active:
                if starts.check():
                    continue
                break
            if deadline is not None and time.monotonic() >= deadline:
                # the runtime is over: a batch being written finishes first, as on a stop
                # (stopping a query inside a batch kills Spark's stream thread)
                _wait_idle(processors, queries, 60.0)
                break
            if any(p.learning for p in processors):  # replanned between two batches
                learned.wait(0.5)
                learned.clear()
            else:
                _await(active[0], 1)
        starts.check(ending=True)
    except SqeError:
        raise
    except Exception as exc:
        lost = server_lost(exc)
        if lost is not None:
            queries.clear()  # they ended with the server
            abandon(spark)
            raise RunError(lost) from None
        if isinstance(exc, (PySparkException, Py4JError)):
            raise RunError(describe_failure(exc, processors)) from None
        raise
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        for proc in processors:
            proc.close()
        if follower is not None:
            follower.stop()
        hub.ended()
    return list(reports)
