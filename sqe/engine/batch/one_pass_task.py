"""The executor side of a one-pass batch (:mod:`sqe.engine.batch.one_pass`): what each Spark task
runs over its rows.

A task gets the rows of its Kafka partitions: a row per record, with a struct column per
state, NULL when the state's query does not keep the record, and the source's tally rows
(all of them in one struct column ``_sqe_row``, from the planned frame, or as columns).
It first checks that nothing needs the ``foreachBatch`` way (a value the deserializer cannot
read); if something does, it writes nothing and says so.  Otherwise it hands each state's rows
to that state's task (:meth:`~state.sink.Sink.pass_task`) and returns, as one JSON row,
what the driver needs to commit and report: the records, the new high-water mark of each (pid,
source partition), the source's counters, the warning counts and each state's counts.
Nothing in it scales with the records but the marks, which scale with the upstream partitions.
It makes its Arrow arrays and scalars with :mod:`sqe.wire.arrays`, so a worker never imports
pandas (``tests/wire/test_arrays.py``).

:func:`planned_task` is the same made once for the run (classic Spark), each batch's states'
tasks made in the Spark task from the context a local property of the batch's job carries;
:func:`merge_results` adds the tasks' rows up on the driver.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from sqe.config.worker_task import begin_task
from sqe.errors import RunError
from sqe.source.replay import pair_groups
from sqe.wire.arrays import binaries, from_numpy, strings, to_numpy
from sqe.wire.columns import TALLY, Tally
from state.sink import RowTask, Sink, add_counts

__all__ = ["PassResult", "RESULT_SCHEMA", "add_marks", "add_marks_reference", "merge_results",
           "pass_task", "planned_task"]

#: The rows the tasks return: one ``result`` (JSON) each, then a row per piece of ``data`` a
#: state's task gave for the driver (``state``: its query's index), e.g. Postgres's CSV.  A
#: type, not a DDL string, which the driver would have Spark's JVM parse at every batch.
RESULT_SCHEMA = StructType([StructField("result", StringType()), StructField("state", IntegerType()),
                            StructField("data", BinaryType())])
_RESULT = pa.schema([("result", pa.string()), ("state", pa.int32()), ("data", pa.binary())])

_RAW, _BAD, _REFUSED, _ROW = "_sqe_raw", "_sqe_bad", "_sqe_refused", "_sqe_row"


@dataclass
class PassResult:
    """What the tasks of a one-pass batch found and wrote (added up by :func:`merge_results`)."""

    records: int = 0  # record rows (replays already dropped by the source)
    unparseable_keys: int = 0  # records without a StreamMetadata key
    #: values the deserializer cannot read and rows a state cannot hold: the batch then goes
    #: the per-batch way, which applies the bad-record policy to them
    refused: int = 0
    marks: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, partition) -> hi
    tally: Tally = field(default_factory=Tally)
    warnings: list[int] = field(default_factory=list)
    states: dict[int, dict[str, int]] = field(default_factory=dict)  # query -> counts
    data: dict[int, list[bytes]] = field(default_factory=dict)  # query -> its task's data


def pass_task(states: Sequence[tuple[int, RowTask]], warnings: int
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a one-pass batch: ``states`` are (query index, the
    state's task) of the states to write; ``warnings``, how many warning columns there are.

    Rows are handled as Spark's Arrow batches come, so a task holds one of them at a time;
    each state's task runs once for the Spark task, in a thread of its own, over an iterator
    of its rows that the batches feed (:class:`_Feed`), as the per-batch way's job runs it: a
    Kafka state flushes once, at the end, and packs its chunks from all its rows.  A state's
    task yields count rows; a binary column ``data`` of them goes to the driver."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        out = PassResult(warnings=[0] * warnings)
        feeds: dict[int, _Feed] = {}
        try:
            for batch in batches:
                if batch.schema.names == [_ROW]:  # the planned frame's one struct column
                    batch = pa.RecordBatch.from_struct_array(batch.column(0))
                table = pa.Table.from_batches([batch])
                _read(table, out, warnings)
                if out.refused:
                    continue  # the per-batch way writes it all; read on: the counts are whole
                for index, task in states:
                    column = table.column(f"_sqe_state{index}")
                    column = column.filter(pc.is_valid(column)).combine_chunks()
                    out.states.setdefault(index, {})
                    if len(column):  # a state without a row is never called (write_empty)
                        if index not in feeds:
                            feeds[index] = _Feed(task)
                        feeds[index].put(pa.RecordBatch.from_struct_array(column))
        finally:
            ended = [(index, feed, feed.close()) for index, feed in feeds.items()]
        for index, feed, error in ended:
            if error is not None:
                raise error
            _counted(feed.sent, index, out)
        yield _result_batch(out)

    return run


def planned_task(states: Sequence[tuple[int, Sink]], warnings: int, key: str
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a stream planned with its task: :func:`pass_task` over
    the states of ``states`` (query index, a copy of its sink as planned) that the batch
    writes, each state's task made in the Spark task from the context the driver gave the
    batch's job as local property ``key`` (JSON: query index -> the state's
    :meth:`~state.sink.Sink.pass_context`; a state the batch does not write is absent)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # an executor's, only in a task

        ctx = TaskContext.get()
        text = ctx.getLocalProperty(key) if ctx is not None else None
        if text is None:
            raise RunError(f"a one-pass task ran without its batch's local property {key} "
                               "(its job was not started by the stream's batch)")
        given = json.loads(text)
        tasks = [(i, sink.pass_task(given[str(i)])) for i, sink in states if str(i) in given]
        yield from pass_task(tasks, warnings)(batches)

    return run


class _Feed:
    """A state's task running in a thread of its own over the rows :meth:`put` gives it, one
    Arrow batch at a time (at most two waiting), until :meth:`close`."""

    _END = None

    def __init__(self, task: RowTask) -> None:
        self.sent: list[pa.RecordBatch] = []
        self.error: BaseException | None = None
        self._rows: queue.Queue[pa.RecordBatch | None] = queue.Queue(maxsize=2)
        self._ended = False  # the task saw the end of its rows
        self._thread = threading.Thread(target=self._run, args=(task,), daemon=True,
                                         name="sqe-one-pass-state")
        self._thread.start()

    def _given(self) -> Iterator[pa.RecordBatch]:
        while (rows := self._rows.get()) is not None:
            yield rows
        self._ended = True

    def _run(self, task: RowTask) -> None:
        try:
            self.sent.extend(task(self._given()))
        except BaseException as exc:  # given to the Spark task's thread by close()
            self.error = exc
        finally:
            while not self._ended and self._rows.get() is not None:  # put() and close() go on
                pass

    def put(self, rows: pa.RecordBatch) -> None:
        """Give the task ``rows``; raise its error, should it have failed."""
        if self.error is not None:
            raise self.error
        self._rows.put(rows)

    def close(self) -> BaseException | None:
        """End the task's rows and wait for it; its error, or None."""
        self._rows.put(self._END)
        self._thread.join()
        return self.error


def _counted(sent: list[pa.RecordBatch], index: int, out: PassResult) -> None:
    """A state task's count rows added up into ``out``, and its data kept."""
    counts = out.states.setdefault(index, {})
    for batch in sent:
        if "data" in batch.schema.names:
            out.data.setdefault(index, []).extend(d for d in batch.column("data").to_pylist()
                                                  if d)
            batch = batch.drop_columns(["data"])
        for row in batch.to_pylist():
            add_counts(counts, row)


def _result_batch(out: PassResult) -> pa.RecordBatch:
    """A task's rows for the driver: its ``result`` (JSON), then a row per piece of a state's
    ``data``."""
    pieces = [(i, d) for i, ds in out.data.items() for d in ds]
    valid = np.arange(1 + len(pieces)) > 0  # the result row has no state and no data
    return pa.RecordBatch.from_arrays(
        [strings([_dumps(out)] + [None] * len(pieces)),
         from_numpy(np.array([0] + [i for i, _ in pieces], dtype=np.int32), valid=valid),
         binaries([None] + [d for _, d in pieces])], schema=_RESULT)


def _read(table: pa.Table, out: PassResult, warnings: int) -> None:
    """Add the record rows' counts, marks and refusals, the tally rows' counters and every
    row's warnings to ``out``."""
    offset = table.column(f"{_RAW}_offset")
    names = [f"{_RAW}_pid", f"{_RAW}_source_partition", f"{_RAW}_source_offset"]
    data = table.select([*names, _BAD]).filter(pc.is_valid(offset))
    out.records += data.num_rows
    pid = data.column(names[0])
    out.unparseable_keys += pid.null_count
    out.refused += _trues(data.column(_BAD)) + sum(
        _trues(table.column(name)) for name in table.column_names if name.startswith(_REFUSED))
    keyed = data.filter(pc.and_(pc.and_(pc.is_valid(pid), pc.is_valid(data.column(names[1]))),
                                pc.is_valid(data.column(names[2])))).select(names)
    if keyed.num_rows:
        add_marks(out.marks, *[to_numpy(keyed.column(n)) for n in names])
    if offset.null_count:
        tallies = table.select([f"{_RAW}{name}" for name in TALLY]).filter(pc.is_null(offset))
        out.tally.add(Tally(**{name[1:]: int(pc.sum(tallies.column(f"{_RAW}{name}")).as_py()
                                             or 0) for name in TALLY}))
    for k in range(warnings):
        out.warnings[k] += _trues(table.column(f"_sqe_warn{k}"))


def add_marks(marks: dict[tuple[int, int], int], pid: np.ndarray, part: np.ndarray,
              offset: np.ndarray) -> None:
    """Raise ``marks`` to the highest ``offset`` of each (``pid``, ``part``) pair of the rows
    (:func:`add_marks_reference` is the row-by-row statement of it, which the tests hold it
    equal to)."""
    pairs, inverse = pair_groups(pid, part)
    hi = np.full(len(pairs), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(hi, inverse, np.asarray(offset, dtype=np.int64))
    for (p, s), h in zip(pairs.tolist(), hi.tolist(), strict=True):
        marks[(p, s)] = max(h, marks.get((p, s), h))


def add_marks_reference(marks: dict[tuple[int, int], int], pid: np.ndarray, part: np.ndarray,
                        offset: np.ndarray) -> None:
    """:func:`add_marks`, a row at a time."""
    for p, s, o in zip(pid.tolist(), part.tolist(), offset.tolist(), strict=True):
        marks[(p, s)] = max(o, marks.get((p, s), o))


def _trues(column: pa.ChunkedArray | pa.Array) -> int:
    """How many values of a boolean column are true."""
    return int(pc.sum(pc.cast(column, pa.int64())).as_py() or 0)


def _dumps(r: PassResult) -> str:
    return json.dumps({"records": r.records, "unparseable_keys": r.unparseable_keys,
                       "refused": r.refused,
                       "marks": [[p, s, hi] for (p, s), hi in r.marks.items()],
                       "tally": {name[1:]: getattr(r.tally, name[1:]) for name in TALLY},
                       "warnings": r.warnings,
                       "states": {str(i): c for i, c in r.states.items()}})


def merge_results(rows: Iterable[Any], warnings: int) -> PassResult:
    """The tasks' result rows (``result`` JSON, or a state's ``data``) added up."""
    total = PassResult(warnings=[0] * warnings)
    for row in rows:
        if row["result"] is None:
            total.data.setdefault(int(row["state"]), []).append(bytes(row["data"]))
            continue
        r = json.loads(row["result"])
        total.records += r["records"]
        total.unparseable_keys += r["unparseable_keys"]
        total.refused += r["refused"]
        for p, s, hi in r["marks"]:
            total.marks[(p, s)] = max(hi, total.marks.get((p, s), hi))
        total.tally.add(Tally(**r["tally"]))
        total.warnings = [a + b for a, b in zip(total.warnings, r["warnings"], strict=True)]
        for index, counts in r["states"].items():
            add_counts(total.states.setdefault(int(index), {}), counts)
    return total
