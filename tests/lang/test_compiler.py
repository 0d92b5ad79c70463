"""The compiler: SQE expressions become Spark built-in Columns and queries become projections.

Every compiled function is evaluated on small batches with NULLs (``=`` is NULL-safe, the other
comparisons follow SQL, arithmetic gives NULL on a division by zero or an overflow), Spark SQL
strings and awkward field names work, unsupported functions fail with a located TopologyError,
and ``compile_query`` filters, renames, keeps the carried StreamMetadata columns and row order,
and never plans a Python UDF.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sqe.errors import TopologyError
from sqe.lang.compiler import compile_expression, compile_query
from sqe.lang.expressions import Sql, parse_expression
from sqe.lang.functions import FUNCTIONS
from sqe.lang.spark_functions import CompileContext
from sqe.lang.topology import Query, parse_commands
from sqe.wire.columns import CARRIED, field_column

pytestmark = pytest.mark.spark

BIG = 2**63 - 1
SMALL = -(2**63)

PYTHON_UDF_MARKERS = ("BatchEvalPython", "ArrowEvalPython", "PythonUDF", "pythonUDF")


def evaluate(frame, **raws):
    """``{name: [value per row]}`` of each raw SQE expression, rows in the frame's order."""
    ctx = CompileContext(frame)
    columns = [compile_expression(parse_expression(raw), name, ctx).alias(name)
               for name, raw in raws.items()]
    rows = frame.select(*columns).collect()
    return {name: [row[name] for row in rows] for name in raws}


def query(where=None, **insert_into):
    """A Query command parsed the way topology files are (``select`` given as ``expressions``)."""
    expressions = insert_into.pop("expressions")
    body = {
        "insertInto": {"objectName": "out", **insert_into},
        "select": {"expressions": expressions},
        "from": {"objectName": "in"},
    }
    if where is not None:
        body["where"] = where
    (command,) = parse_commands([{"Query": body}], "test.yaml")
    assert isinstance(command, Query)
    return command


def executed_plan(frame) -> str:
    return frame._jdf.queryExecution().executedPlan().toString()


@pytest.fixture(scope="module")
def numbers(spark):
    rows = [(7, 2), (None, 3), (4, None), (BIG, 1), (SMALL, 1), (5, 0), (BIG, 2), (-7, 3)]
    return spark.createDataFrame(rows, "a bigint, b bigint")


@pytest.fixture(scope="module")
def booleans(spark):
    rows = [(True, True), (True, False), (False, False), (True, None), (False, None), (None, None)]
    return spark.createDataFrame(rows, "p boolean, q boolean")


@pytest.fixture(scope="module")
def pairs(spark):
    rows = [(1, 1, "x"), (1, 2, "y"), (2, 1, None), (None, 1, "x"), (None, None, None)]
    return spark.createDataFrame(rows, "a bigint, b bigint, s string")


@pytest.fixture(scope="module")
def events(spark):
    rows = [
        ("ann", 70, 1, 0, 10), ("bob", 20, 1, 0, 11), ("cy", None, 1, 1, 5),
        ("dee", 51, 1, 1, 6), ("eve", 50, 1, 0, 12),
    ]
    return spark.createDataFrame(
        rows, "name string, amount bigint, _sqe_pid bigint, _sqe_partition int, _sqe_offset bigint")


# -- arithmetic ------------------------------------------------------------------------------


def test_arithmetic_gives_null_for_null_operands_division_by_zero_and_overflow(numbers):
    got = evaluate(numbers, add={"+": ["a", "b"]}, sub={"-": ["a", "b"]}, mul={"*": ["a", "b"]},
                   div={"/": ["a", "b"]}, mod={"%": ["a", "b"]})
    # rows: (7,2) (N,3) (4,N) (BIG,1) (SMALL,1) (5,0) (BIG,2) (-7,3)
    assert got["add"] == [9, None, None, None, SMALL + 1, 5, None, -4]
    assert got["sub"] == [5, None, None, BIG - 1, None, 5, BIG - 2, -10]
    assert got["mul"] == [14, None, None, BIG, SMALL, 0, None, -21]
    assert got["div"] == [3.5, None, None, float(BIG), float(SMALL), None, BIG / 2, -7 / 3]
    assert got["mod"] == [1, None, None, 0, 0, None, 1, -1]  # the sign of the dividend, as Java


def test_arithmetic_aliases_and_constants(numbers):
    got = evaluate(numbers.limit(1), plus={"Plus": ["a", 1]}, minus={"Minus": [10, "a"]},
                   subtract={"Subtract": ["a", 0.5]}, multiply={"Multiply": ["a", "a"]},
                   divide={"Divide": [1, 0]}, modulus={"Modulus": [1, 0]}, mod={"MOD": [10, "a"]})
    assert got == {"plus": [8], "minus": [3], "subtract": [6.5], "multiply": [49],
                   "divide": [None], "modulus": [None], "mod": [3]}


def test_arithmetic_types_follow_sqes_java_promotion(spark):
    frame = spark.createDataFrame([(5, 2, 1.5, 0.25)], "i int, l bigint, f float, d double")
    exprs = {"ii": {"+": ["i", "i"]}, "il": {"*": ["i", "l"]}, "ic": {"-": ["i", 1]},
             "mod": {"%": ["i", "l"]}, "ff": {"+": ["f", "f"]}, "fi": {"%": ["f", "i"]},
             "fd": {"*": ["f", "d"]}, "fc": {"-": ["f", 1]}, "div": {"/": ["i", "i"]}}
    ctx = CompileContext(frame)
    out = frame.select(*[compile_expression(parse_expression(r), n, ctx).alias(n)
                         for n, r in exprs.items()])
    assert {f.name: f.dataType.simpleString() for f in out.schema.fields} == {
        "ii": "bigint", "il": "bigint", "ic": "bigint", "mod": "bigint", "ff": "double",
        "fi": "double", "fd": "double", "fc": "double", "div": "double"}
    assert out.first().asDict() == {"ii": 10, "il": 10, "ic": 4, "mod": 1, "ff": 3.0,
                                    "fi": 1.5, "fd": 0.375, "fc": 0.5, "div": 1.0}


def test_nested_arithmetic_null_propagates_instead_of_failing(numbers):
    got = evaluate(numbers, v={"+": [{"*": ["a", 2]}, {"/": ["a", "b"]}]})
    assert got["v"][0] == 14 + 3.5
    assert got["v"][5] is None  # 5 / 0
    assert got["v"][6] is None  # BIG * 2 overflows


# -- logic -----------------------------------------------------------------------------------


def test_and_or_not(booleans):
    got = evaluate(booleans, a={"And": ["p", "q"]}, o={"Or": ["p", "q"]}, n={"Not": ["p"]},
                   a1={"and": ["p"]}, a3={"AND": ["p", "q", True]}, o3={"Or": ["p", "q", False]})
    # rows: (T,T) (T,F) (F,F) (T,N) (F,N) (N,N); three-valued logic as SQL
    assert got["a"] == [True, False, False, None, False, None]
    assert got["o"] == [True, True, False, True, None, None]
    assert got["n"] == [False, False, True, False, True, None]
    assert got["a1"] == [True, True, False, True, False, None]
    assert got["a3"] == got["a"]
    assert got["o3"] == got["o"]


def test_xor_is_true_for_an_odd_number_of_trues(booleans):
    got = evaluate(booleans, x1={"Xor": ["p"]}, x2={"Xor": ["p", "q"]}, x3={"Xor": ["p", "q", True]},
                   all3={"Xor": [True, True, True]}, none3={"Xor": [False, False, False]})
    assert got["x1"] == [True, True, False, True, False, None]
    assert got["x2"] == [False, True, False, None, None, None]
    assert got["x3"] == [True, False, True, None, None, None]
    assert set(got["all3"]) == {True}
    assert set(got["none3"]) == {False}


# -- comparisons -----------------------------------------------------------------------------


def test_equals_is_null_safe(pairs):
    got = evaluate(pairs, eq={"=": ["a", "b"]}, equals={"Equals": ["a", "b"]},
                   null_const={"=": ["a", None]}, both_null={"=": [None, None]},
                   string={"=": ["s", {"C": "x"}]}, across_types={"=": ["a", 1.0]})
    # rows: (1,1,x) (1,2,y) (2,1,N) (N,1,x) (N,N,N)
    assert got["eq"] == [True, False, False, False, True]
    assert got["equals"] == got["eq"]
    assert got["null_const"] == [False, False, False, True, True]
    assert set(got["both_null"]) == {True}
    assert got["string"] == [True, False, False, True, False]
    assert got["across_types"] == [True, True, False, False, False]


def test_equals_and_in_across_kinds_are_false_not_a_cast_error(spark):
    frame = spark.createDataFrame([(1, "1", 1.0), (None, None, None)], "n bigint, s string, f float")
    got = evaluate(frame, number_string={"=": ["n", "s"]}, constant={"=": ["n", {"C": "Cat"}]},
                   string_number={"Equals": ["s", 1]}, float_long={"=": ["f", "n"]},
                   mixed={"In": ["n", {"C": "1"}, 1]}, none={"In": ["n", {"C": "Cat"}]},
                   strings={"In": ["s", 1, {"C": "1"}]})
    # rows: (1, "1", 1.0f) (N, N, N); the string "1" never equals the number 1, as in SQE
    assert got["number_string"] == [False, True]  # and null = null, whatever the types
    assert got["constant"] == got["string_number"] == [False, False]
    assert got["float_long"] == [True, True]
    assert got["mixed"] == [True, None]
    assert got["none"] == [False, False]  # no value of the kind left: never in
    assert got["strings"] == [True, None]


def test_numbers_compare_as_sqes_clojure_numbers(spark):
    frame = spark.createDataFrame([(16777217, 16777216.0)], "i int, f float")
    got = evaluate(frame, eq={"=": ["i", "f"]}, gt={">": ["i", "f"]}, ne={"!=": ["i", "f"]},
                   isin={"In": ["i", "f"]})
    # 16777217 is not a float: Spark alone compares as float (equal), SQE as double
    assert got == {"eq": [False], "gt": [True], "ne": [True], "isin": [False]}


def test_ordering_comparisons_follow_sql_nulls(pairs):
    got = evaluate(pairs, ne={"!=": ["a", "b"]}, gt={">": ["a", "b"]}, ge={">=": ["a", "b"]},
                   lt={"<": ["a", "b"]}, le={"<=": ["a", "b"]}, ne_alias={"NotEquals": ["a", "b"]},
                   gt_alias={"GreaterThan": ["a", 1]}, le_alias={"LessThanEqual": ["a", 1.5]})
    assert got["ne"] == [False, True, True, None, None]
    assert got["gt"] == [False, False, True, None, None]
    assert got["ge"] == [True, False, True, None, None]
    assert got["lt"] == [False, True, False, None, None]
    assert got["le"] == [True, True, False, None, None]
    assert got["ne_alias"] == got["ne"]
    assert got["gt_alias"] == [False, False, True, None, None]
    assert got["le_alias"] == [True, True, False, None, None]


def test_in_with_several_values(pairs):
    got = evaluate(pairs, one={"In": ["a", 1]}, many={"in": ["a", 5, 2, 9]},
                   strings={"In": ["s", {"C": "y"}, {"C": "z"}]}, fields={"In": ["b", "a", 7]})
    assert got["one"] == [True, True, False, None, None]
    assert got["many"] == [False, False, True, None, None]
    assert got["strings"] == [False, True, None, False, None]
    assert got["fields"] == [True, False, False, None, None]


def test_rlike_matches_the_whole_value_as_sqes_java_matches(spark):
    frame = spark.createDataFrame([("abc", 7), ("ABC", 17), ("xabcx", 70), (None, None)],
                                  "s string, n bigint")
    got = evaluate(frame, anchored={"RLike": ["s", {"C": "^a.c$"}]},
                   partial={"rlike": ["s", {"C": "b"}]}, inside={"RLike": ["s", {"C": ".*b.*"}]},
                   case_insensitive={"RLike": ["s", {"C": "(?i)abc"}]},
                   number={"RLike": ["n", {"C": "7"}]})
    assert got["anchored"] == [True, False, False, None]
    assert got["partial"] == [False, False, False, None]  # "b" is not the whole of "abc"
    assert got["inside"] == [True, False, True, None]
    assert got["case_insensitive"] == [True, True, False, None]
    assert got["number"] == [True, False, False, None]  # a number is matched as its text


def test_rlike_is_javas_matches_for_alternations_line_breaks_quotes_and_columns(spark):
    frame = spark.createDataFrame([("ab", "a|ab"), ("abc\n", "abc"), ("a.b", "a.b"),
                                   ("axb", "a\\.b")], "s string, p string")
    got = evaluate(frame, alternation={"RLike": ["s", {"C": "a|ab"}]},
                   line_break={"RLike": ["s", {"C": "abc$"}]},
                   quoted={"RLike": ["s", {"C": "\\Qa.b"}]}, column={"RLike": ["s", "p"]})
    assert got["alternation"] == [True, False, False, False]  # "ab" is a whole alternative
    assert got["line_break"] == [False, False, False, False]  # $ before a final \n: not whole
    assert got["quoted"] == [False, False, True, False]  # an open \Q quotes to the end
    assert got["column"] == [True, False, True, False]


def test_if_takes_the_else_branch_on_false_and_null(spark):
    frame = spark.createDataFrame([(True, 1, 2), (False, 1, 2), (None, 1, 2), (True, None, 2)],
                                  "c boolean, a bigint, b bigint")
    got = evaluate(frame, v={"If": ["c", "a", "b"]},
                   label={"if": [{">": ["a", 0]}, {"C": "pos"}, {"C": "other"}]})
    assert got["v"] == [1, 2, 2, None]
    assert got["label"] == ["pos", "pos", "pos", "other"]


# -- constants, Spark SQL and field names ----------------------------------------------------


def test_constants(pairs):
    got = evaluate(pairs.limit(1), s={"C": "text"}, i=42, f=0.5, t=True, f2=False, n={"C": None})
    assert got == {"s": ["text"], "i": [42], "f": [0.5], "t": [True], "f2": [False], "n": [None]}


def test_sql_expressions(pairs):
    got = evaluate(pairs, upper={"sql": "upper(s)"}, plus={"sql": "a + b"},
                   nested={">": [{"sql": "coalesce(a, 0) * 10"}, 5]},
                   inside_if={"If": [{"sql": "s IS NULL"}, {"C": "none"}, "s"]})
    assert got["upper"] == ["X", "Y", None, "X", None]
    assert got["plus"] == [2, 3, 3, None, None]
    assert got["nested"] == [True, True, True, False, False]
    assert got["inside_if"] == ["x", "y", "none", "x", "none"]
    assert compile_expression(Sql("1 + 1")) is not None


def test_field_column_quotes_dots_spaces_and_backticks(spark):
    schema = StructType([
        StructField("a.b", LongType()),
        StructField("a", StructType([StructField("b", LongType())])),
        StructField("my field", StringType()),
        StructField("we`ird", LongType()),
    ])
    frame = spark.createDataFrame([(1, (2,), "x", 3)], schema)
    row = frame.select(field_column("a.b"), field_column("my field"), field_column("we`ird")).first()
    assert tuple(row) == (1, "x", 3)  # "a.b" is the top-level column, not field b of struct a
    got = evaluate(frame, dotted={"+": ["a.b", 10]}, spaced={"=": ["my field", {"C": "x"}]},
                   tick={"*": ["we`ird", 2]})
    assert got == {"dotted": [11], "spaced": [True], "tick": [6]}


def test_not_an_expression_is_a_type_error():
    with pytest.raises(TypeError, match="not an expression"):
        compile_expression("amount")


# -- every catalogue function ----------------------------------------------------------------

_ARGS = {
    "parsedate": ["s", {"C": "yyyy-MM-dd"}], "formatdate": ["t", {"C": "yyyy"}],
    "rounddate": ["t", 1, {"C": "hour"}], "gettime": ["t"], "hash": ["s"],
    "getmapvalue": ["m", {"C": "a"}], "expandkeys": ["m"], "expandvalues": ["m"],
    "sum": ["n"], "max": ["n"], "createhll": ["s"], "createhllp": ["s"],
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_catalogue_function_compiles_and_runs(spark, name):
    spec = FUNCTIONS[name]
    frame = spark.sql("SELECT 'x' AS s, 2 AS n, true AS b, timestamp'2020-01-01 00:00:00' AS t, "
                      "map('a', 1) AS m")
    args = _ARGS.get(name) or ["b" if name in {"and", "or", "xor", "not"} else "n"] * spec.min_args
    if name == "if":
        args = ["b", "n", "n"]
    col = compile_expression(parse_expression({name: args}), "here",
                             CompileContext(frame))
    assert len(frame.select(col).collect()) == 1


# -- compile_query ---------------------------------------------------------------------------


def test_compile_query_filters_renames_in_order_and_carries_metadata(events):
    q = query(where={">": ["amount", 50]}, fields=["who", "twice", "big"],
              expressions=["name", {"*": ["amount", 2]}, {">": ["amount", 60]}])
    out = compile_query(q, events, "test.yaml: command 2 (Query)").frame
    assert out.columns == ["who", "twice", "big", *CARRIED]
    assert [tuple(r) for r in out.collect()] == [
        ("ann", 140, True, 1, 0, 10),
        ("dee", 102, False, 1, 1, 6),
    ]  # amount 50 is not > 50, and a NULL amount makes where NULL: dropped


def test_compile_query_without_where_keeps_every_row(events):
    q = query(fields=["n"], expressions=["name"])
    out = compile_query(q, events, "q").frame
    assert [r["n"] for r in out.collect()] == ["ann", "bob", "cy", "dee", "eve"]


def test_compile_query_without_carried_columns_outputs_only_the_fields(spark):
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "x bigint, y string")
    out = compile_query(query(fields=["y2", "x2"], expressions=["y", "x"]), frame, "q").frame
    assert out.columns == ["y2", "x2"]
    assert [tuple(r) for r in out.collect()] == [("a", 1), ("b", 2)]


def test_compile_query_keeps_only_the_carried_columns_present(spark):
    frame = spark.createDataFrame([(1, 9)], "x bigint, _sqe_offset bigint")
    out = compile_query(query(fields=["x"], expressions=["x"]), frame, "q").frame
    assert out.columns == ["x", "_sqe_offset"]


def test_a_selected_field_named_like_a_carried_column_is_not_duplicated(events):
    q = query(fields=["_sqe_offset", "name"], expressions=[{"+": ["_sqe_offset", 1000]}, "name"])
    out = compile_query(q, events, "q").frame
    assert out.columns == ["_sqe_offset", "name", "_sqe_pid", "_sqe_partition"]
    assert [r["_sqe_offset"] for r in out.collect()] == [1010, 1011, 1005, 1006, 1012]


def test_selecting_a_carried_column_under_another_name_keeps_both(events):
    out = compile_query(query(fields=["off"], expressions=["_sqe_offset"]), events, "q").frame
    assert out.columns == ["off", *CARRIED]
    assert all(r["off"] == r["_sqe_offset"] for r in out.collect())


def test_chained_queries_keep_the_carried_columns(events):
    first = compile_query(query(fields=["who", "amount"], expressions=["name", "amount"]), events,
                          "q1").frame
    second = compile_query(query(where={"RLike": ["who", {"C": "[ab].*"}]}, fields=["w"],
                                 expressions=["who"]), first, "q2").frame
    assert second.columns == ["w", *CARRIED]
    assert [tuple(r) for r in second.collect()] == [("ann", 1, 0, 10), ("bob", 1, 0, 11)]


def test_compile_query_preserves_row_order_within_a_partition(spark):
    rows = [(f"r{i}", i % 3, i // 3, i) for i in range(30)]  # source partition i % 3, offset i // 3
    frame = (spark.sparkContext.parallelize(rows, 4)
             .toDF("name string, _sqe_partition int, _sqe_offset bigint, n bigint")
             .withColumn("_sqe_pid", F.lit(5).cast("long")))
    q = query(where={"!=": [{"%": ["n", 4]}, 1]}, fields=["name"], expressions=["name"])
    out = compile_query(q, frame, "q").frame
    expected = [[r["name"] for r in part if r["n"] % 4 != 1] for part in frame.rdd.glom().collect()]
    assert [[r["name"] for r in part] for part in out.rdd.glom().collect()] == expected
    per_source: dict[int, list[int]] = {}
    for r in out.collect():
        per_source.setdefault(r["_sqe_partition"], []).append(r["_sqe_offset"])
    assert per_source and all(offsets == sorted(offsets) for offsets in per_source.values())


def test_compile_query_errors_name_the_clause(events):
    bad_where = query(where={">": [{"RoundDate": ["name", 1, {"C": "week"}]}, 0]}, fields=["n"],
                      expressions=["name"])
    with pytest.raises(TopologyError, match=r"^t\.yaml: command 3 \(Query\) -> where -> >"
                                            r" -> argument 1 -> rounddate -> argument 3: unit "
                                            r"'week'"):
        compile_query(bad_where, events, "t.yaml: command 3 (Query)")
    bad_select = query(fields=["n", "d"], expressions=["name", {"FormatDate": ["name", {"C": "Y"}]}])
    with pytest.raises(TopologyError, match=r"^q -> select -> expression 2 -> formatdate -> "
                                            r"argument 2: date "):
        compile_query(bad_select, events, "q")


@pytest.mark.parametrize("expressions,where,message", [
    pytest.param(["name", {"+": ["amount", {"RoundDate": ["name", 1, {"C": "week"}]}]}], None,
                 "select -> expression 2 -> + -> argument 2 -> rounddate -> argument 3: unit "
                 "'week' is not one of", id="function-argument"),
    pytest.param(["name"], {"and": [True, {">": [{"Hash": ["name", "name"]}, 0]}]},
                 "where -> and -> argument 2 -> > -> argument 1 -> hash -> argument 1: the "
                 "algorithm must be a constant", id="where-and-operand"),
    pytest.param(["name", {"Max": [{"FormatDate": ["name", {"C": "Y"}]}]}], None,
                 "select -> expression 2 -> max -> argument 1 -> formatdate -> argument 2: date "
                 "pattern 'Y'", id="aggregate-input"),
    pytest.param(["name", "amount", {"CreateHll": ["name", 30]}], None,
                 "select -> expression 3 -> createhll -> argument 2: log2m must be a whole "
                 "number 4..21", id="aggregate-argument"),
])
def test_compile_errors_number_expressions_and_arguments_from_1(events, expressions, where,
                                                                message):
    """Errors found while compiling (with Spark) are located as validation locates them."""
    q = query(where=where, fields=[f"f{i}" for i in range(len(expressions))],
              expressions=expressions)
    with pytest.raises(TopologyError) as info:
        compile_query(q, events, "t.yaml: command 2 (Query)")
    assert str(info.value).startswith(f"t.yaml: command 2 (Query) -> {message}"), str(info.value)


# -- no Python UDFs --------------------------------------------------------------------------


def test_compiled_queries_plan_no_python_udf(spark, events):
    expressions = [
        {"+": ["amount", 1]}, {"-": ["amount", 1]}, {"*": ["amount", 2]}, {"/": ["amount", 3]},
        {"%": ["amount", 7]}, {"And": [{">": ["amount", 1]}, {"<": ["amount", 100]}]},
        {"Or": [{">=": ["amount", 1]}, {"<=": ["amount", 0]}]}, {"Xor": [True, {"!=": ["amount", 5]}]},
        {"Not": [{"=": ["name", {"C": "ann"}]}]}, {"In": ["amount", 20, 70]},
        {"RLike": ["name", {"C": "^a"}]}, {"If": [{"Equals": ["amount", None]}, 0, "amount"]},
        {"sql": "upper(name)"},
    ]
    q = query(where={"Or": [{">": ["amount", 10]}, {"RLike": ["name", {"C": "e$"}]}]},
              fields=[f"c{i}" for i in range(len(expressions))], expressions=expressions)
    out = compile_query(q, events, "q").frame
    plan = executed_plan(out)
    assert "Project" in plan and "Filter" in plan
    assert not [m for m in PYTHON_UDF_MARKERS if m in plan], plan
    assert len(out.collect()) == 4  # and it runs

    # The check can see a Python UDF when there is one.
    with_udf = events.select(F.udf(lambda v: v, "string")("name"))
    assert [m for m in PYTHON_UDF_MARKERS if m in executed_plan(with_udf)]


# -- regressions: problems found and fixed -----------------------------------------------


def test_a_field_named_like_a_carried_column_in_other_case_is_not_ambiguous(events):
    out = compile_query(query(fields=["_SQE_OFFSET"], expressions=["name"]), events, "q").frame
    out.select("_sqe_offset").collect()
