"""The executor side of a one-pass batch (:mod:`sqe.engine.one_pass`): what each Spark task
runs over its rows.

A task gets the rows of its Kafka partitions: each record's own row (``_q`` = -1) and one
row per query, whose state's columns are NULL when the query's ``where`` drops the record.
It first checks that nothing needs the ``foreachBatch`` way (a value the deserializer cannot
read); if something does, it writes nothing and says so.  Otherwise it hands each state's rows
to that state's task (:meth:`~sqe.state.sink.Sink.pass_task`) and returns, as one JSON row,
what the driver needs to commit and report: the records, the new high-water mark of each (pid,
source partition), the source's counters, the warning counts and each state's counts.
Nothing in it scales with the records but the marks, which scale with the upstream partitions.

:func:`merge_results` adds the tasks' rows up on the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sqe.config.worker_task import begin_task
from sqe.state.sink import RowTask, add_counts
from sqe.wire.columns import TALLY, Tally

__all__ = ["PassResult", "RESULT_SCHEMA", "merge_results", "pass_task"]

#: The rows the tasks return: one ``result`` (JSON) each, then a row per piece of ``data`` a
#: state's task gave for the driver (``state``: its query's index), e.g. Postgres's CSV.
RESULT_SCHEMA = "result string, state int, data binary"
_RESULT = pa.schema([("result", pa.string()), ("state", pa.int32()), ("data", pa.binary())])

_QUERY, _RAW, _BAD, _REFUSED = "_q", "_sqe_raw", "_sqe_bad", "_sqe_refused"


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


def pass_task(states: Sequence[tuple[int, RowTask, bool]], warnings: int
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a one-pass batch: ``states`` are (query index, the
    state's task, whether it takes all the task's rows in one call) of the states to write;
    ``warnings``, how many warning columns there are.  Rows are handled as Spark's Arrow
    batches come, so a task holds one of them (and the rows of a state that takes them in one
    call).  A state's task yields count rows; a binary column ``data`` of them goes to the
    driver."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        out = PassResult(warnings=[0] * warnings)
        held: dict[int, list[pa.RecordBatch]] = {i: [] for i, _, once in states if once}
        for batch in batches:
            table = pa.Table.from_batches([batch])
            _read(table, out, warnings)
            if out.refused:
                continue  # the per-batch way writes it all; read on, so the counts are whole
            query = table.column(_QUERY)
            for index, task, _ in states:
                column = table.column(f"_sqe_state{index}")
                column = table.filter(pc.and_(pc.equal(query, index), pc.is_valid(column))
                                      ).column(f"_sqe_state{index}").combine_chunks()
                out.states.setdefault(index, {})
                if not len(column):
                    continue  # no row for this state (as write_empty: no call)
                rows = pa.RecordBatch.from_struct_array(column)
                if index in held:
                    held[index].append(rows)
                else:
                    _send(task, [rows], index, out)
        if not out.refused:
            for index, task, once in states:
                if once and held[index]:
                    _send(task, held[index], index, out)
        pieces = [(i, d) for i, ds in out.data.items() for d in ds]
        yield pa.RecordBatch.from_pydict(
            {"result": [_dumps(out)] + [None] * len(pieces),
             "state": [None] + [i for i, _ in pieces], "data": [None] + [d for _, d in pieces]},
            schema=_RESULT)

    return run


def _send(task: RowTask, rows: list[pa.RecordBatch], index: int, out: PassResult) -> None:
    """Run a state's ``task`` over ``rows``, adding up its counts and keeping its data."""
    counts = out.states.setdefault(index, {})
    for sent in task(iter(rows)):
        if "data" in sent.schema.names:
            out.data.setdefault(index, []).extend(d for d in sent.column("data").to_pylist()
                                                  if d)
            sent = sent.drop_columns(["data"])
        for row in sent.to_pylist():
            add_counts(counts, row)


def _read(table: pa.Table, out: PassResult, warnings: int) -> None:
    """Add the record rows' counts, marks and refusals, and every row's warnings, to ``out``."""
    base = table.filter(pc.equal(table.column(_QUERY), -1))
    offset = base.column(f"{_RAW}_offset")
    data = base.filter(pc.is_valid(offset))
    out.records += data.num_rows
    pid = data.column(f"{_RAW}_pid")
    out.unparseable_keys += pid.null_count
    out.refused += _trues(data.column(_BAD)) + sum(
        _trues(table.column(name)) for name in table.column_names if name.startswith(_REFUSED))
    keyed = data.filter(pc.is_valid(pid)).select(
        [f"{_RAW}_pid", f"{_RAW}_source_partition", f"{_RAW}_source_offset"])
    if keyed.num_rows:
        grouped = keyed.group_by([f"{_RAW}_pid", f"{_RAW}_source_partition"]).aggregate(
            [(f"{_RAW}_source_offset", "max")])
        for p, s, hi in zip(*[grouped.column(i).to_pylist() for i in range(3)], strict=True):
            if hi is not None:
                out.marks[(p, s)] = max(hi, out.marks.get((p, s), hi))
    tallies = base.filter(pc.is_null(offset))
    if tallies.num_rows:
        out.tally.add(Tally(**{name[1:]: int(pc.sum(tallies.column(f"{_RAW}{name}")).as_py()
                                             or 0) for name in TALLY}))
    for k in range(warnings):
        out.warnings[k] += _trues(table.column(f"_sqe_warn{k}"))


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
