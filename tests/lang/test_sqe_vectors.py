"""SQE's own expression test cases (``tests/vectors/sqe_functions.jsonl``) through the compiler on
Spark: every case's value and type are the ones the original Java SQE gives.

Each line of the file is one case of SQE's Java unit tests: the expression tree, its input
columns (Spark SQL types; ``ts_ms`` is a timestamp given as epoch milliseconds, UTC), the
input rows, what SQE returns (a list: one output row per element) and, for arithmetic, the
Java type of the result.

**Types.**  The compiled column's Spark type must be the Spark twin of the Java type SQE
returns:

==========================================  =========================================
SQE (Java)                                  Spark
==========================================  =========================================
``long`` (Integer or Long arithmetic)       ``bigint`` (LongType)
``double`` (Float or Double arithmetic)     ``double`` (DoubleType)
Boolean, String                             ``boolean``, ``string``
``Hash``: ``byte[]`` (8 bytes)              ``binary``; the vector gives the 8 bytes
                                            read as a big-endian signed long
``ParseDate``, ``RoundDate``: ``Date``      ``timestamp``; the vector gives epoch ms
``CreateHll``/``CreateHllp``: a sketch      ``binary`` (a DataSketches sketch); the
                                            vector gives its estimate, read with
                                            ``hll_sketch_estimate``
``Max``, ``GetMapValue``, ``ExpandValues``  the type of the value passed through
(the input object, unchanged)               (``Max`` over bigint gives bigint, the
                                            values of a ``map<string,int>`` are int)
==========================================  =========================================

**Speed.**  Cases are grouped by kind (row by row, generator, aggregation) and row count;
each group is one wide frame (case ``i``'s column ``c0`` is ``k{i}_c0``) evaluated by one
select or query, so the 170 cases take a handful of Spark jobs.  When a group's job fails,
its cases are run one by one so the failure names the case.

**Exceptions.**  :data:`EXCEPTIONS` lists the cases Spark cannot match, with what Spark gives
instead and why; docs/migrating.md's "Differences from SQE" lists the same cases.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.lang.compiler import compile_expression, compile_query
from sqe.lang.expressions import Expression, Field, Function, parse_expression, to_raw
from sqe.lang.post_filter import compile_filter
from sqe.lang.spark_functions import CompileContext
from sqe.lang.topology import Query, parse_commands
from sqe.wire.columns import ARROW_SCHEMA, RECORD_COLUMNS
from tests.support import ROOT, VECTORS

pytestmark = pytest.mark.spark

CASES: list[dict[str, Any]] = [
    json.loads(line) for line in (VECTORS / "sqe_functions.jsonl").read_text().splitlines()
    if line.strip()]

#: (test, case) -> (the Spark type given instead of SQE's, why).  The value still agrees.
EXCEPTIONS: dict[tuple[str, str], tuple[T.DataType, str]] = {
    ("ProcessArithmeticOperatorTest", c): (
        T.DoubleType(),
        "SQE's integer / integer is a long when the division is exact and a double otherwise "
        "(Clojure's Ratio); a Spark column has one type for all rows, so it is a double")
    for c in ("/ (I4,I2)", "/ (I4,L2)", "/ (L4,L2)")
}

_AGGREGATES = {"max", "sum", "createhll", "createhllp"}
_GENERATORS = {"expandkeys", "expandvalues"}


def _name(case: dict[str, Any]) -> str:
    return f"{case['test']} / {case['case']}"


def _function(case: dict[str, Any]) -> str:
    expr = parse_expression(case["expression"])
    return expr.name if isinstance(expr, Function) else ""


def _type(ddl: str) -> T.DataType:
    return T.LongType() if ddl == "ts_ms" else T.DataType.fromDDL(ddl)


def expected_type(case: dict[str, Any]) -> T.DataType:
    """The Spark twin of the Java type SQE returns (the table in the module docstring)."""
    fn = _function(case)
    if fn in ("hash", "createhll", "createhllp"):
        return T.BinaryType()
    if fn in ("parsedate", "rounddate"):
        return T.TimestampType()
    if case["expected_type"] is not None:
        return {"long": T.LongType(), "double": T.DoubleType()}[case["expected_type"]]
    sample = case["expected"][0] if isinstance(case["expected"], list) else case["expected"]
    if isinstance(sample, bool):
        return T.BooleanType()
    if isinstance(sample, str):
        return T.StringType()
    source = _type(case["columns"]["c0"])  # a value passed through: its input's type
    return source.valueType if isinstance(source, T.MapType) else source


def _python(value: Any, kind: T.DataType) -> Any:
    """A JSON value as Spark takes it for ``kind`` (JSON map keys are strings)."""
    if value is None:
        return None
    if isinstance(kind, T.MapType):
        return {_python(json.loads(k) if not isinstance(kind.keyType, T.StringType) else k,
                        kind.keyType): _python(v, kind.valueType) for k, v in value.items()}
    if isinstance(kind, (T.FloatType, T.DoubleType)):
        return float(value)
    return value


def _renamed(expr: Expression, prefix: str) -> Expression:
    if isinstance(expr, Field):
        return Field(prefix + expr.name)
    if isinstance(expr, Function):
        return Function(expr.name, tuple(_renamed(a, prefix) for a in expr.args))
    return expr


def _frame(spark, cases: list[tuple[int, dict[str, Any]]], rows: int) -> DataFrame:
    """One wide frame: case ``i``'s column ``c`` is ``k{i}_c``, row ``r`` its ``r``-th row."""
    fields, columns, stamps = [], [], []
    for i, case in cases:
        for j, (col, ddl) in enumerate(case["columns"].items()):
            kind = _type(ddl)
            fields.append(T.StructField(f"k{i}_{col}", kind))
            columns.append([_python(row[j], kind) for row in case["rows"]])
            if ddl == "ts_ms":
                stamps.append(f"k{i}_{col}")
    data = [tuple(col[r] for col in columns) for r in range(rows)]
    frame = spark.createDataFrame(data, T.StructType(fields))
    return frame.select(*[F.timestamp_millis(c).alias(c) if c in stamps else F.col(c)
                          for c in frame.columns])


@dataclass
class Outcome:
    """What Spark gave for one case: its output values and type, or the error."""

    values: list[Any]
    kind: T.DataType | None = None
    error: str | None = None


def _collect(frame: DataFrame, names: dict[int, str], fns: dict[int, str]) -> dict[int, Outcome]:
    schema = {f.name: f.dataType for f in frame.schema.fields}
    shown = []  # the values the way the vectors write them
    for i, name in names.items():
        col = F.col(name)
        if fns[i] in ("createhll", "createhllp"):
            col = F.hll_sketch_estimate(col)
        elif isinstance(schema[name], T.TimestampType):
            col = F.unix_millis(col)
        shown.append(col.alias(name))
    rows = frame.select(*shown).collect()
    return {i: Outcome([r[name] for r in rows], schema[name]) for i, name in names.items()}


def _row_wise(spark, group: list[tuple[int, dict[str, Any]]], rows: int) -> Callable[[], Any]:
    frame = _frame(spark, group, rows)
    cols, names, fns = [], {}, {}
    ctx = CompileContext(frame)  # one select, as compile_query compiles one
    for i, case in group:
        expr = _renamed(parse_expression(case["expression"]), f"k{i}_")
        cols.append(compile_expression(expr, _name(case), ctx).alias(f"r{i}"))
        names[i], fns[i] = f"r{i}", _function(case)
    return lambda: _collect(frame.select(*cols), names, fns)


def _aggregated(spark, group: list[tuple[int, dict[str, Any]]], rows: int) -> Callable[[], Any]:
    frame = _frame(spark, group, rows)
    exprs = [_renamed(parse_expression(c["expression"]), f"k{i}_") for i, c in group]
    (query,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "fields": [f"r{i}" for i, _ in group]},
        "select": {"expressions": [to_raw(e) for e in exprs]},
        "from": {"objectName": "i"}}}], "vectors")
    assert isinstance(query, Query)
    out = compile_query(query, frame, "vectors").frame
    return lambda: _collect(out, {i: f"r{i}" for i, _ in group},
                            {i: _function(c) for i, c in group})


def _groups() -> list[tuple[str, list[tuple[int, dict[str, Any]]], int]]:
    """(kind, cases, rows): one Spark job each (a generator is alone in its select)."""
    groups: dict[tuple[str, int, int], list[tuple[int, dict[str, Any]]]] = {}
    for i, case in enumerate(CASES):
        fn = _function(case)
        kind = "aggregate" if fn in _AGGREGATES else "generator" if fn in _GENERATORS else "row"
        alone = i if kind == "generator" else -1
        groups.setdefault((kind, len(case["rows"]), alone), []).append((i, case))
    return [(kind, cases, rows) for (kind, rows, _), cases in groups.items()]


def _run(spark, kind: str, cases: list[tuple[int, dict[str, Any]]], rows: int
         ) -> dict[int, Outcome]:
    build = _aggregated if kind == "aggregate" else _row_wise
    try:
        return build(spark, cases, rows)()
    except Exception as exc:  # reported per case below
        if len(cases) == 1:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return {cases[0][0]: Outcome([], None, first[:300])}
        out: dict[int, Outcome] = {}
        for case in cases:
            out.update(_run(spark, kind, [case], rows))
        return out


@pytest.fixture(scope="module")
def outcomes(spark) -> dict[int, Outcome]:
    out: dict[int, Outcome] = {}
    for kind, cases, rows in _groups():
        out.update(_run(spark, kind, cases, rows))
    return out


def _difference(case: dict[str, Any], got: Outcome, want_type: T.DataType) -> str | None:
    want = case["expected"] if isinstance(case["expected"], list) else [case["expected"]]
    if got.error is not None:
        return f"failed: {got.error}"
    values = got.values
    if _function(case) == "hash":
        values = [None if v is None else int.from_bytes(v, "big", signed=True) for v in values]
    if values != want:  # 2.0 == 2 here: the type is checked next
        return f"value: expected {want!r}, got {values!r}"
    if got.kind != want_type:
        return f"type: expected {want_type.simpleString()}, got " \
               f"{got.kind.simpleString() if got.kind else None}"
    return None


def test_every_sqe_case_agrees_value_and_type(outcomes):
    problems = []
    for i, case in enumerate(CASES):
        documented = EXCEPTIONS.get((case["test"], case["case"]))
        want_type = documented[0] if documented else expected_type(case)
        diff = _difference(case, outcomes[i], want_type)
        if diff:
            note = " (a documented exception: its type changed?)" if documented else ""
            problems.append(f"{_name(case)}: {diff}{note}")
    assert not problems, f"{len(problems)} of {len(CASES)} SQE cases differ:\n" + "\n".join(
        problems)


def test_the_vectors_and_the_exceptions_are_all_there():
    assert len(CASES) == 170
    names = {(c["test"], c["case"]) for c in CASES}
    assert set(EXCEPTIONS) <= names
    for case in CASES:  # an exception only changes the type SQE gives
        if (case["test"], case["case"]) in EXCEPTIONS:
            assert EXCEPTIONS[case["test"], case["case"]][0] != expected_type(case)


def test_the_docs_list_every_exception():
    text = (ROOT / "docs" / "migrating.md").read_text()
    section = text.split("## Differences from SQE\n", 1)[1].split("\n#", 1)[0]
    missing = [case for _, case in EXCEPTIONS if f"`{case}`" not in section]
    assert not missing, f"docs/migrating.md's 'Differences from SQE' does not list {missing}"


#: Post-filters (over the source's record columns) that the Arrow compiler and the Spark
#: compiler must answer alike: SQE's RLike and the vectors' cross-type ``=``, on a few rows.
POST_FILTERS = [
    {"RLike": ["_filter_value", {"C": "[0-9a-zA-Z]{8}"}]},
    {"RLike": ["_filter_value", {"C": "a|ab"}]},
    {"=": ["_partition", {"C": "Cat"}]},
    {"=": ["_filter_value", 1]},
    {"=": ["_filter_value", None]},
    {"=": ["_partition", 1.0]},
    {"=": ["_partition", "_offset"]},
    {"Not": [{"=": ["_filter_value", {"C": "ab"}]}]},
    {"In": ["_filter_value", 1, {"C": "Cat"}]},
    {"In": ["_partition", {"C": "1"}, 3]},
]


def test_the_post_filter_keeps_what_the_spark_compiler_keeps(spark):
    rows = [("ABCD1234", 1, 1), ("ABC_1234", 2, 5), ("ABCD12345", None, None), (None, 1, 7),
            ("Cat", 3, 3), ("ab", 1, 2), ("1", None, None)]
    names = ["_filter_value", "_partition", "_offset"]
    table = pa.table({n: [r[j] for r in rows] for j, n in enumerate(names)},
                     pa.schema([ARROW_SCHEMA.field(n) for n in names])
                     ).append_column("_index", pa.array(range(len(rows)), pa.int32()))
    frame = spark.createDataFrame([(*r, i) for i, r in enumerate(rows)],
                                  "_filter_value string, _partition int, _offset bigint, "
                                  "_index int")
    ctx = CompileContext(frame)
    exprs = [parse_expression(raw) for raw in POST_FILTERS]
    kept = frame.select("_index", *[F.coalesce(compile_expression(e, "t", ctx), F.lit(False))
                                    .alias(f"f{k}") for k, e in enumerate(exprs)]).collect()
    for k, (raw, expr) in enumerate(zip(POST_FILTERS, exprs, strict=True)):
        steps = compile_filter(expr, RECORD_COLUMNS)
        arrow = table.filter(steps.expression()).column("_index").to_pylist()
        assert arrow == [r["_index"] for r in kept if r[f"f{k}"]], raw
        masked = table.filter(pa.array(steps.mask(table.to_batches()[0]))).column("_index")
        assert masked.to_pylist() == arrow, raw
