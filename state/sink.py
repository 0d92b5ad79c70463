"""The sink protocol: what every state implements, so the runner writes any state the same way.

A :class:`Sink` is made once per query from its :class:`SinkTarget` (the state's
name, the query's fields and aggregates, the state's options).  For micro-batch
``K`` of a consumer, the runner calls, for every query that writes a state::

    sink.open(batch)               # batch K begins (Postgres: its transaction, its lock)
    if sink.holds():               # this state holds batch K already: write nothing
        ...
    elif (staged := sink.staged(frame)) is not None:
        ...                        # rows the HWM commit applies: staged with the batch's
                                   # other staged rows in one Spark job (stage_together)
    else:
        rows = sink.write(frame)   # the query's rows (plus sink.columns()), from the executors
                                   # (sink.write_empty(frame) when the batch has no row)

and, once every query of the batch has written::

    sink.commit()                  # its part made durable with the batch's record
                                   # (state.commits), or handed to the HWM commit
                                   # (a Redis state in the HWM store's database stages its rows
                                   # in batch.stages, which that commit applies)
    HWM commit                     # HWMs + batch id K (+ staged rows): one atomic step
    sink.close()                   # always, also after a failure

so rows, high-water marks and the batch id are committed together where the
state allows it (see :mod:`sqe.ledger.hwm`), and a batch Spark re-runs writes nothing
twice.  :meth:`Sink.problems` checks a target's options before Spark starts.

A state that can be written in a batch's *one pass* (:mod:`sqe.engine.batch.one_pass`: the
stream read, its queries evaluated and every state written by one Spark job planned once
for the run) says so by :meth:`Sink.pass_columns`, the Spark columns its rows need, planned
once; then, between ``open`` and ``commit``, instead of ``write`` or ``staged``::

    context = sink.pass_context()  # what the batch's task needs, e.g. its stage key
    ...                            # the batch's one job: each Spark task runs every state's
                                   # sink.pass_task(context) over its rows
    rows = sink.pass_done(counts, data)  # its tasks' counts added up, and what they gave

where a stream planned with its task (classic Spark) makes each ``pass_task`` inside the
Spark task, from a copy of the sink pickled with the plan and the context that a local
property of the batch's job carries.

A row :meth:`Sink.rejects` refuses sends the batch the way of ``write`` (which finds it and
applies the bad-record policy), nothing of it committed.  The same calls make Spark's own
sink protocol (:mod:`sqe.engine.batch.hop_sink`): each write task opens the batch, runs
``pass_task`` and commits its part; ``pass_done`` and the HWM commit run in Spark's
``commit(messages, batchId)`` on the driver (a state whose ``pass_done`` writes the rows,
:attr:`Sink.written_by_pass_done`, is opened and committed there instead).

A new state is one module with a :class:`Sink` subclass and one line in
:mod:`state.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import Column, DataFrame

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.config.views import StateSettings
from sqe.errors import StateError
from sqe.lang.expressions import Expression
from sqe.ledger.commits import Commit
from sqe.ledger.hwm import HwmStore, Stage

__all__ = ["Batch", "RowTask", "Sink", "SinkTarget", "Staged", "add_counts", "stage_together",
           "task_counts"]


@dataclass(frozen=True)
class SinkTarget:
    """What one query writes, and where: everything a sink is made from."""

    name: str  # insertInto.objectName: the topic, table or key prefix
    fields: tuple[str, ...]  # insertInto.fields, in order
    settings: StateSettings
    #: aggregate output field -> SQE function name (empty: the query does not aggregate)
    aggregates: Mapping[str, str] = field(default_factory=dict)
    state_type: str | None = None  # insertInto.stateType (TRANSACTIONAL, OPAQUE, ...)
    where: str = ""  # the query in its file, for messages


@dataclass
class Batch:
    """One micro-batch of one consumer, as the sinks see it."""

    consumer: str  # <topology>.<stream>
    batch_id: int  # as the stores count it (see state.commits)
    store: HwmStore | None = None  # the consumer's HWM store; None without filterReplays
    offsets: str | None = None  # the source offsets the batch ends at (Spark's JSON)
    checkpoint: str | None = None  # the stream's checkpoint, recorded with the batch
    stages: list[Stage] = field(default_factory=list)  # rows the HWM commit applies
    #: the batch the writer saw committed before: a store short of it lost commits since, and
    #: the HWM commit refuses (:class:`~sqe.errors.StoreBehind`)
    seen: int | None = None
    #: the run that writes the batch, whose stages no other run shares
    #: (:func:`sqe.ledger.stages.new_writer`; None: the checkpoint names it)
    writer: str | None = None
    _stage_keys: int = 0

    def stage_key(self) -> str:
        """A new key of the HWM store for rows a state stages in this batch."""
        if self.store is None:
            raise StateError(f"batch {self.batch_id} of {self.consumer} has no HWM store")
        self._stage_keys += 1
        return self.store.stage_key(self.batch_id, self.writer or self.checkpoint,
                                    self._stage_keys - 1)


#: What a state's executor task is: Arrow batches of its rows in, one-row count batches out
#: (``written``, and any other counts; ``partitions`` is the most any task saw).
RowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


@dataclass(frozen=True)
class Staged:
    """Rows a state stages in the HWM store for the batch's commit (:meth:`Sink.staged`)."""

    name: str  # the state, for messages
    key: str  # the hash of the HWM store they go to
    rows: DataFrame  # the rows as ``send`` takes them
    store: RedisEndpoint  # the HWM store
    #: Stages several states' rows of one store in one Spark job; returns rows per key.
    send: Callable[[Sequence[Staged]], dict[str, int]]
    replicas: int = 0  # the HWM store's replicas that must hold the staged rows
    replica_timeout: float = 10.0  # seconds they have to acknowledge them


def stage_together(staged: Sequence[Staged]) -> dict[str, int]:
    """Every state's staged rows, one Spark job per store and kind; the rows staged per
    key.  A batch of two Redis states runs one job instead of two (a Spark job's fixed cost is
    about 0.15 s)."""
    groups: dict[tuple[Callable[..., dict[str, int]], RedisEndpoint], list[Staged]] = {}
    for item in staged:
        groups.setdefault((item.send, item.store), []).append(item)
    counts: dict[str, int] = {}
    for (send, _), items in groups.items():
        counts |= send(items)
    return counts


class Sink(ABC):
    """One query's state (see the module docstring for the order of the calls)."""

    #: The ``stateName`` of the sinks of this class.
    state_name: ClassVar[str]
    #: What :meth:`write` counts: rows written, or (``True``) aggregate entries merged.
    merges: ClassVar[bool] = False
    #: Whether :meth:`pass_done` writes the rows (the data its tasks gave) in what :meth:`open`
    #: began on the driver; then its tasks need no open batch.
    written_by_pass_done: ClassVar[bool] = False

    def __init__(self, target: SinkTarget) -> None:
        self.target = target
        self._batch: Batch | None = None

    @classmethod
    def create(cls, target: SinkTarget) -> Sink:
        """The sink of ``target`` (a class may choose a variant, e.g. an aggregating one)."""
        return cls(target)

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        """What is wrong with ``target``'s options and fields, one located sentence each."""
        return []

    @property
    def batch(self) -> Batch:
        """The batch between :meth:`open` and :meth:`close`."""
        if self._batch is None:
            raise StateError(f"{self.describe()}: no batch is open")
        return self._batch

    def describe(self) -> str:
        """The state in messages, e.g. ``Kafka state enriched``."""
        return f"{self.state_name.capitalize()} state {self.target.name}"

    def where(self) -> str | None:
        """Where the state lives, for ``sqe status``: an address without secrets (None: this
        process, e.g. the console)."""
        return None

    def columns(self) -> dict[str, tuple[Expression, str]]:
        """Columns the frame must carry besides the fields, e.g. a Kafka state's filter value:
        name -> (expression, what it is in messages); the runner compiles and adds them."""
        return {}

    def producers(self) -> dict[str, dict[str, Any]]:
        """The Kafka producers this state's executor tasks write with (role -> settings), which
        a worker makes ahead of its first write (:func:`sqe.clients.producers.make_ahead`):
        none by default."""
        return {}

    def rejects(self, frame: DataFrame) -> list[tuple[Column, str]]:
        """Conditions on the rows this state is given (``frame``) under which it cannot hold
        a row, each with the reason (said in the bad record's sentence).  Checked only when a
        batch failed, to find the records behind it."""
        return []

    def open(self, batch: Batch) -> None:
        """Begin ``batch``."""
        self._batch = batch

    def holds(self) -> bool:
        """Whether this state already holds the open batch (then it is not written again)."""
        return False

    @abstractmethod
    def write(self, frame: DataFrame) -> int:
        """Write the batch's rows; returns how many were written."""

    def write_empty(self, frame: DataFrame) -> int:
        """The batch has no row for this state (every record was a replay): do what
        :meth:`write` does for no row, ideally without a Spark job.  ``frame`` has the
        columns :meth:`write` would get and no row.  By default, :meth:`write` of it."""
        return self.write(frame)

    def staged(self, frame: DataFrame) -> Staged | None:
        """The batch's rows as this state stages them in the HWM store for its commit, when
        it does (the runner stages every such state's rows together, :func:`stage_together`,
        instead of calling :meth:`write`); None (the default): :meth:`write` writes them."""
        return None

    def pass_columns(self, frame: DataFrame, hwm: HwmStore | None) -> list[Column] | None:
        """The columns this state's task needs, as Spark built-ins over the query's output
        ``frame`` (its fields and the :meth:`columns`), when the state can be written in the
        batch's one pass (``hwm``: the stream's HWM store, None without filterReplays); None
        (the default): it cannot, and the stream's batches go the way of :meth:`write`."""
        return None

    def pass_context(self) -> dict[str, Any]:
        """What the open batch's task needs beyond what was planned (:meth:`pass_columns`), as
        JSON values without secrets: a Spark local property carries it to the tasks of a
        stream planned with its task (and Spark's event log records it); nothing by default."""
        return {}

    def pass_task(self, context: Mapping[str, Any]) -> RowTask:
        """The function executor tasks run over a batch's rows of this state (with the
        :meth:`pass_columns`), in the batch's one pass, made from what was planned and the
        batch's :meth:`pass_context` (on the driver, or in a task from a copy of the sink)."""
        raise NotImplementedError(f"{self.describe()} is not written in one pass")

    def pass_planned(self, columns: Sequence[str]) -> None:
        """The task columns planned for this state (:meth:`pass_columns`'s names), given to a
        copy of the sink that did not plan them (Spark's own sink protocol, where each task
        gets the sink anew); nothing by default."""
        return None

    def pass_done(self, counts: Mapping[str, int], data: Sequence[bytes]) -> int:
        """The rows written, from the counts the :meth:`pass_task` tasks yielded (added up) and
        the ``data`` they gave for the driver (a binary column ``data``), on the driver before
        :meth:`commit`."""
        return counts.get("written", 0)

    def commit(self) -> None:
        """Make this state's part of the batch durable, or add it to ``batch.stages``.

        Nothing by default: what :meth:`write` wrote is durable already (written again
        by a retry, idempotently or as replays the next hop drops).
        """
        return None

    def close(self) -> None:
        """End the batch, committed or not (a transaction left open is rolled back)."""
        self._batch = None

    def committed(self, consumer: str) -> Commit | None:
        """This state's record of ``consumer``'s last committed batch (:mod:`sqe.ledger.commits`);
        None for states that keep none (their writes are idempotent or replay-filtered)."""
        return None

    def reset(self, consumer: str) -> Commit | None:
        """Forget the offsets of ``consumer``'s last batch here, keeping its id (``sqe reset``);
        returns the record as it was."""
        return None


def task_counts(sent: DataFrame, key: str | None = None) -> dict[str | None, dict[str, int]]:
    """The count rows a state's write tasks yielded (``mapInArrow`` of one row per task,
    :func:`sqe.wire.arrays.counts_batch`), added up per ``key`` column (``None``: all in
    one); a ``partitions`` column is the most any task found, the others are summed.

    The rows are collected as they are and added up here: a Spark aggregate of them would
    be one more stage (a shuffle of a few rows) in every write job.
    """
    out: dict[str | None, dict[str, int]] = {}
    for row in sent.collect():
        values = row.asDict()
        add_counts(out.setdefault(values.pop(key) if key is not None else None, {}), values)
    return out


def add_counts(total: dict[str, int], counts: Mapping[str, int | None]) -> None:
    """Add one task's ``counts`` to ``total``: ``partitions`` is the most any task found, the
    others are summed (NULL counts as 0)."""
    for name, value in counts.items():
        value = int(value or 0)
        total[name] = max(total.get(name, 0), value) if name == "partitions" \
            else total.get(name, 0) + value
