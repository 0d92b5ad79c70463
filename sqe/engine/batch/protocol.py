"""The batch protocol: the steps every way of writing a micro-batch takes, and the one place
the crash point between a batch's write and its commit is named.

Batch ``K`` of consumer ``C``, once admitted against what the stores committed
(:class:`~sqe.engine.batch.processor.BatchProcessor`; the ``sqe-hop`` sink's commit), goes:

1. **read**: the source's rows of the batch, from the offsets Spark planned;
2. **filter**: replays, at or below the consumer's high-water marks, dropped (in the source's
   tasks; for Spark's own connector, by the per-batch way), and the batch's new marks found,
   from its rows or from what its source tasks read;
3. **write**: each state opened for the attempt (:class:`States`); a state that holds ``K``
   already writes nothing, the others are written, their own part committed, and all closed;
4. **commit**: the marks, ``K`` and the rows the states staged, to the HWM store in one atomic
   step (:func:`commit`), right after the crash point ``before-commit``.

The ways a batch is written implement it: the one pass (:mod:`~sqe.engine.batch.one_pass_batch`:
steps 1 to 3 in one Spark job), the per-batch way (:mod:`~sqe.engine.batch.per_batch`), a hop's
own function (:mod:`~sqe.engine.batch.hop_batch`), each a :class:`BatchWay`; and the ``sqe-hop``
sink (:mod:`~sqe.engine.batch.hop_sink`), whose write runs in Spark's write tasks and whose
commit is Spark's call of the sink's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Protocol

from pyspark.sql import DataFrame

from sqe.engine.batch.commit import Applier, commit_hwm
from sqe.faults import fault_point
from sqe.observe.batch_report import BatchReport
from state.sink import Batch, Sink

__all__ = ["BatchWay", "States", "commit"]


class BatchWay(Protocol):
    """A way of writing an admitted batch: steps 1 to 4 for ``rows`` (the source's rows of
    ``batch``), counting into ``report``.  True: written and committed; False: nothing of it is
    committed, and the batch needs the per-batch way (which finds the record behind it)."""

    def __call__(self, rows: DataFrame, batch: Batch, report: BatchReport) -> bool:
        ...


class States:
    """The states one attempt at a batch writes (step 3): each opened for the attempt as it is
    reached, committed together once all are written (:meth:`commit`), and closed on leaving
    the ``with`` block, written or not."""

    def __init__(self, attempt: Batch, report: BatchReport | None = None) -> None:
        self.attempt = attempt
        self.report = report  # told of each state that holds the batch already
        self.sinks: list[Sink] = []  # opened, in the order reached

    def open(self, sink: Sink | None, name: str = "") -> bool:
        """Open state ``name``'s ``sink`` for the attempt; whether to write it: not when it
        holds the batch already (Spark ran it again), which the report is told."""
        assert sink is not None
        self.sinks.append(sink)
        sink.open(self.attempt)
        if not sink.holds():
            return True
        if self.report is not None:
            if name not in self.report.already_written:
                self.report.already_written.append(name)
            self.report.written[name] = 0
        return False

    def commit(self) -> None:
        """Every opened state's own part of the batch (a Postgres state's transaction, ...)."""
        for sink in self.sinks:
            sink.commit()

    def __enter__(self) -> States:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for sink in self.sinks:
            sink.close()


def commit(attempt: Batch, marks: Mapping[tuple[int, int], int],
           applier: Applier | None = None) -> None:
    """Step 4: ``attempt``'s marks, id and staged rows committed to its HWM store in one step
    (:func:`~sqe.engine.batch.commit.commit_hwm`; ``applier`` applies the rows meanwhile),
    after the crash point ``before-commit``: a process killed there has written every state
    and committed no mark, and the batch runs again, its writes filtered as replays."""
    fault_point("before-commit", attempt.batch_id)
    commit_hwm(attempt, marks, applier)
