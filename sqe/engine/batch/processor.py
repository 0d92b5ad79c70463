"""One micro-batch of one stream: the ``foreachBatch`` body (it runs on the driver).

Per micro-batch ``K`` of a stream (consumer ``<topology>.<stream>``), with ``filterReplays``:
read the committed batch ``C`` from the HWM store; ``K == C`` ending at the same source offsets
was committed already (Spark re-ran it) and is skipped; ``K < C``, or ``K == C`` with other
offsets, is another writer ahead and fails loudly.  ``K`` counts from the checkpoint's base
(:mod:`sqe.engine.spark.checkpoint`), and every store records it with the offsets the batch ends at
and the checkpoint (:mod:`sqe.ledger.commits`).  A batch refused as stale, here or by a store
later, deletes what its Redis states staged.

Then the batch is written and committed, by one of the ways that implement the batch
protocol (:mod:`sqe.engine.batch.protocol`): in one pass when the stream was planned once
(:mod:`sqe.engine.batch.one_pass_batch`: one Spark job), else the per-batch way
(:mod:`sqe.engine.batch.per_batch`), which also takes a one-pass batch that needs it (a record
it cannot take); a hop's batch, by the user's function (:mod:`sqe.engine.batch.hop_batch`).

The batch's counters are a :class:`~sqe.observe.batch_report.BatchReport`, logged and
given to the runner (which appends it to the progress file and tells the run's watchers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from pyspark.sql import DataFrame

from sqe.engine.batch.commit import Applier, dropped
from sqe.engine.batch.joined import JoinedHop
from sqe.engine.batch.learned_types import json_wanted, learn, save_learned
from sqe.engine.batch.one_pass import OnePassPlan
from sqe.engine.batch.one_pass_batch import OnePassWay
from sqe.engine.batch.per_batch import PerBatchWay
from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.batch.protocol import BatchWay
from sqe.engine.batch.stream_frame import own_source
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.engine.spark.spark_api import describe_jobs
from sqe.errors import StaleBatchError, StateError
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import answered
from sqe.ledger.stages import new_writer
from sqe.observe.batch_report import BatchReport, partition_offsets
from sqe.source.kafka import KafkaSource
from state.sink import Batch

__all__ = ["BatchProcessor"]

log = logging.getLogger("sqe")


class BatchProcessor:
    """The ``foreachBatch`` function of one stream."""

    def __init__(self, pipeline: StreamPipeline, on_done: Callable[[BatchReport], None],
                 checkpoint: StreamCheckpoint | None = None, base: int = 0,
                 plan: OnePassPlan | None = None,
                 way: BatchWay | None = None,
                 learning: bool = False, on_learned: Callable[[], None] | None = None,
                 drain: bool = False, joined: Sequence[JoinedHop] = ()) -> None:
        self.p = pipeline
        self.way = way  # writes each batch instead (a hop's: the user's function)
        #: a batch the stores hold is still run through, writing nothing: a hop's query may
        #: hold state in Spark's state store, which Spark computes again and checks
        self.drain = drain
        #: the other hops the query reads (a join): their consumers commit after this one's
        self.joined = tuple(joined)
        self.on_done = on_done  # given each batch's report once it is committed (or skipped)
        self.checkpoint = checkpoint  # where Spark keeps this stream's offsets
        self.base = base  # the id the stores count this checkpoint's batch 0 as
        #: this run's writer: its Redis stages are its own, though another run of the stream
        #: write the same batch at once (:mod:`sqe.ledger.stages`)
        self._writer = new_writer(checkpoint.location if checkpoint is not None else None)
        self.failure: BaseException | None = None
        self._batch_id = 0  # the batch being processed, as the stores count it
        #: the last batch this stream saw committed to its HWM store (a store that then holds
        #: less lost commits: the next batch is refused, :class:`~sqe.errors.StoreBehind`)
        self._seen: int | None = None
        self._kept: HwmStore | None = None  # the HWM store, kept between batches (_store)
        self._applier = Applier()  # applies a one-pass batch's committed rows meanwhile
        self._per_batch = PerBatchWay(pipeline, self._name_jobs)
        #: the stream planned once (``plan``): its batches are written in one pass
        self._one_pass = OnePassWay(plan, self._name_jobs, self._applier) if plan else None
        #: the JSON field types a batch learned that the stream's plan does not read yet
        #: (:mod:`sqe.engine.batch.learned_types`): the runner plans the stream again with them
        self.replan: dict[str, str] | None = None
        #: its batches' JSON field types are learned (saved in ``checkpoint``)
        self.learning = learning and checkpoint is not None
        self._on_learned = on_learned  # told when :attr:`replan` is set
        self._idle = threading.Event()  # set while no batch is being processed
        self._idle.set()

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        self._idle.clear()
        try:
            self._process(rows, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._idle.set()
            if self.replan is not None and self._on_learned is not None:
                self._on_learned()

    def __getstate__(self) -> dict[str, Any]:
        """What is pickled to run on a Spark Connect server: not this process's events."""
        state = dict(self.__dict__)
        del state["_idle"]
        state["_on_learned"] = None  # the server's batches keep the types in the checkpoint
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._idle = threading.Event()
        self._idle.set()

    @property
    def busy(self) -> bool:
        """Whether a batch is being processed."""
        return not self._idle.is_set()

    def wait_idle(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for no batch to be processed; whether none is."""
        return self._idle.wait(seconds)

    def _store(self) -> HwmStore | None:
        """The consumer's HWM store: the one the last batch used, whose client reconnects as
        needed, or (after a failed batch) a new one."""
        if self._kept is None:
            self._kept = self.p.stores.hwm_store()
        return self._kept

    def close(self) -> None:
        """Wait for the last batch's rows to be applied, and close the HWM stores' clients this
        processor keeps between batches."""
        try:
            self._applier.wait()
        finally:
            self._close_store()
            for joined in self.joined:
                joined.close()

    def _close_store(self) -> None:
        if self._kept is not None:
            self._kept.client.close()
            self._kept = None

    def _process(self, rows: DataFrame, spark_batch: int) -> None:
        batch_id = self._batch_id = self.base + spark_batch  # as the stores count it
        ck = self.checkpoint
        offsets = ck.end_offsets(spark_batch) if ck is not None else None
        report = BatchReport(self.p.stream.streamName, batch_id, filtering=self.p.filtering,
                             offsets=partition_offsets(offsets))
        self._applier.wait()  # the last batch's rows, before this one reads the store
        store = self._store()
        failed = True
        others: list[JoinedHop] = []  # the joined hops whose stores lack the batch
        try:
            if store is not None:
                # a lower batch id, or the same with other offsets: StaleBatchError
                todo = answered(store, partial(store.admit, batch_id, offsets, self._seen),
                                f"batch {batch_id} of {self.p.consumer}", "its admission",
                                f"cannot read the HWM store of {self.p.consumer}")
                others = [j for j in self.joined if j.admit(spark_batch)]
                if not todo:  # committed already: Spark re-ran a finished batch
                    if self.drain:
                        self._name_jobs(rows, "run the batch again, writing nothing (the "
                                        "stores hold it; Spark's state store computes it)")
                        rows.write.format("noop").mode("overwrite").save()
                    for joined in others:  # the driver died between the commits
                        joined.commit(spark_batch, report)
                    report.skipped = True
                    failed = False
                    self._seen = batch_id
                    self._done(report)
                    return
            batch = Batch(self.p.consumer, batch_id, store, offsets,
                          ck.location if ck is not None else None, seen=self._seen,
                          writer=self._writer)
            if self.way is not None:
                self.way(rows, batch, report)
            elif self._one_pass is None:
                self._per_batch(rows, batch, report)
                self._learn()
            elif not self._one_pass(rows, batch, report):
                # the per-batch way finds the record behind it, in the batch read again
                self._per_batch(self._read_again(rows, spark_batch), batch, report)
                self._learn()
            for joined in others:  # after this consumer's commit
                joined.commit(spark_batch, report)
            failed = False
            self._seen = batch_id if store is not None else None
        except StaleBatchError as exc:
            if store is not None:  # refused: what this run staged for the batch goes too
                sinks = sum(1 for step in self.p.steps if step.sink is not None)
                raise dropped(store, batch_id, self._writer, sinks, exc) from None
            raise
        finally:
            if failed:  # the next batch starts on a new connection
                self._close_store()
        self._done(report)

    def _learn(self) -> None:
        """Keep the JSON field types the batch just written inferred, when they are new."""
        inferred = self._per_batch.inferred
        if not self.learning or inferred is None or self.checkpoint is None:
            return
        known = self.replan or self.p.learned
        types = learn(inferred, json_wanted(self.p.wanted_fields), known)
        if types is None or types == known:
            return
        save_learned(self.checkpoint, types)
        log.info(f"{self.p.consumer}: its batches learned the types of its JSON fields "
                 f"({', '.join(f'{k} {v}' for k, v in types.items())}); the stream is planned "
                 "again with them")
        self.replan = types

    def _read_again(self, rows: DataFrame, spark_batch: int) -> DataFrame:
        """The source's rows of a one-pass batch, read again from its offsets (a batch read:
        no query runs on them)."""
        ck, source = self.checkpoint, self.p.source
        span = ck.batch_range(spark_batch) if ck is not None else None
        if span is None or source is None:  # batch 0 of a checkpoint an older SQE began
            raise StateError(f"{self.p.consumer} batch {self._batch_id}: it has a record "
                             "that the per-batch way must judge, and where it starts is not "
                             "recorded (a checkpoint that an older SQE began and whose first "
                             "batch never committed); nothing of it is committed: delete the "
                             "checkpoint and run again, and the batch starts over")
        start, end = span
        moved = self.p.starting_at(start, "the batch's start").source
        assert moved is not None
        spark = rows.sparkSession
        with own_source(spark, KafkaSource):
            return spark.read.format(KafkaSource.name()).options(
                **replace(moved, ending=end).to_options()).load()

    def _name_jobs(self, frame: DataFrame, what: str) -> None:
        """Name the Spark jobs started next (Spark's UI and event log show the name)."""
        describe_jobs(frame.sparkSession, f"sqe {self.p.consumer} batch {self._batch_id}: {what}")

    def _done(self, report: BatchReport) -> None:
        report.duration_s = max(0.0, time.time() - report.started)
        log.info(report.line())
        self.on_done(report)
