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

#: The one column of the rows the tasks return.
RESULT_SCHEMA = "result string"

_QUERY, _RAW, _BAD = "_q", "_sqe_raw", "_sqe_bad"


@dataclass
class PassResult:
    """What the tasks of a one-pass batch found and wrote (added up by :func:`merge_results`)."""

    records: int = 0  # record rows (replays already dropped by the source)
    unparseable_keys: int = 0  # records without a StreamMetadata key
    bad_values: int = 0  # values the deserializer cannot read: the batch goes the careful way
    marks: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, partition) -> hi
    tally: Tally = field(default_factory=Tally)
    warnings: list[int] = field(default_factory=list)
    states: dict[int, dict[str, int]] = field(default_factory=dict)  # query -> counts


def pass_task(states: Sequence[tuple[int, RowTask]], warnings: int
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a one-pass batch: ``states`` are (query index, the
    state's task) of the states to write; ``warnings``, how many warning columns there are."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        got = list(batches)
        out = PassResult(warnings=[0] * warnings)
        if got:
            table = pa.Table.from_batches(got).combine_chunks()
            _read(table, out, warnings)
            if not out.bad_values:
                query = table.column(_QUERY)
                for index, task in states:
                    column = table.column(f"_sqe_state{index}")
                    column = table.filter(pc.and_(pc.equal(query, index),
                                                  pc.is_valid(column))).column(
                        f"_sqe_state{index}").combine_chunks()
                    counts = out.states.setdefault(index, {})
                    if not len(column):
                        continue  # no row for this state (as write_empty: no job, no call)
                    rows = pa.RecordBatch.from_struct_array(column)
                    for sent in task(iter([rows])):
                        for row in sent.to_pylist():
                            add_counts(counts, row)
        yield pa.RecordBatch.from_pydict({"result": [_dumps(out)]})

    return run


def _read(table: pa.Table, out: PassResult, warnings: int) -> None:
    """The record rows' counts, marks and bad values, and every row's warnings."""
    base = table.filter(pc.equal(table.column(_QUERY), -1))
    offset = base.column(f"{_RAW}_offset")
    data = base.filter(pc.is_valid(offset))
    out.records = data.num_rows
    pid = data.column(f"{_RAW}_pid")
    out.unparseable_keys = pid.null_count
    out.bad_values = int(pc.sum(pc.cast(data.column(_BAD), pa.int64())).as_py() or 0)
    keyed = data.filter(pc.is_valid(pid)).select(
        [f"{_RAW}_pid", f"{_RAW}_source_partition", f"{_RAW}_source_offset"])
    if keyed.num_rows:
        grouped = keyed.group_by([f"{_RAW}_pid", f"{_RAW}_source_partition"]).aggregate(
            [(f"{_RAW}_source_offset", "max")])
        for p, s, hi in zip(*[grouped.column(i).to_pylist() for i in range(3)], strict=True):
            if hi is not None:
                out.marks[(p, s)] = hi
    tallies = base.filter(pc.is_null(offset))
    if tallies.num_rows:
        out.tally = Tally(**{name[1:]: int(pc.sum(tallies.column(f"{_RAW}{name}")).as_py() or 0)
                             for name in TALLY})
    for k in range(warnings):
        out.warnings[k] = int(pc.sum(pc.cast(table.column(f"_sqe_warn{k}"),
                                             pa.int64())).as_py() or 0)


def _dumps(r: PassResult) -> str:
    return json.dumps({"records": r.records, "unparseable_keys": r.unparseable_keys,
                       "bad_values": r.bad_values,
                       "marks": [[p, s, hi] for (p, s), hi in r.marks.items()],
                       "tally": {name[1:]: getattr(r.tally, name[1:]) for name in TALLY},
                       "warnings": r.warnings,
                       "states": {str(i): c for i, c in r.states.items()}})


def merge_results(rows: Iterable[Any], warnings: int) -> PassResult:
    """The tasks' result rows (``result`` JSON) added up."""
    total = PassResult(warnings=[0] * warnings)
    for row in rows:
        r = json.loads(row["result"])
        total.records += r["records"]
        total.unparseable_keys += r["unparseable_keys"]
        total.bad_values += r["bad_values"]
        for p, s, hi in r["marks"]:
            total.marks[(p, s)] = max(hi, total.marks.get((p, s), hi))
        total.tally.add(Tally(**r["tally"]))
        total.warnings = [a + b for a, b in zip(total.warnings, r["warnings"], strict=True)]
        for index, counts in r["states"].items():
            add_counts(total.states.setdefault(int(index), {}), counts)
    return total
