"""Spark SQL strings read without Spark: what parses (as Spark's parser does), where a syntax
error is, which columns a string reads; and Spark type names.

The valid expressions below were each checked against Spark 4's own parser
(``sessionState.sqlParser.parseExpression``); they must never be refused at validation.
"""

from __future__ import annotations

import pytest

from sqe.lang.spark_names import SPARK_FUNCTIONS
from sqe.lang.spark_types import type_problem
from sqe.lang.sql import SqlSyntaxError, position, sql_columns

#: Expressions Spark parses, with the columns they read.
VALID = [
    ("upper(region)", ["region"]),
    ("event_id IS NOT NULL", ["event_id"]),
    ("'load_log'", []),
    ("concat(_partition, ':', _offset)", ["_partition", "_offset"]),
    ("coalesce(a, 0) * 10", ["a"]),
    ("CASE WHEN a > 1 THEN 'x' ELSE 'y' END", ["a"]),
    ("transform(arr, x -> x + y)", ["arr", "y"]),  # x is the lambda's variable
    ("filter(arr, (x, i) -> x > i)", ["arr"]),
    ("aggregate(arr, 0, (acc, x) -> acc + x)", ["arr"]),
    ("transform(arr, x -> x + 1)[0] + x", ["arr", "x"]),  # the last x is a column
    ("s.field + m['k'] + arr[0]", ["s", "m", "arr"]),
    ("payload:a.b::int", ["payload"]),  # VARIANT path extraction (Spark 4)
    ("`my field` + 1", ["my field"]),
    ("x AS y", ["x"]),
    ("a <=> b", ["a", "b"]),
    ("a >>> 2", ["a"]),
    ("a IN (SELECT z FROM tbl)", ["a"]),
    ("sum(a) OVER (PARTITION BY b)", ["a", "b"]),
    ("count(*)", []),
    ("current_date", []), ("current_timestamp", []), ("user", []), ("current_time", []),
    ("`user`", ["user"]),
    ("interval 1 day", []), ("date '2020-01-01'", []), ("x'0A'", []), ("10L + 1.5BD", []),
    ("cast(a AS decimal(10,2))", ["a"]), ("a::string", ["a"]),
    ("trim(BOTH ' ' FROM s)", ["s"]), ("extract(year FROM d)", ["d"]),
    ("'it''s' || \"q\"", []), ("a rlike '^x' AND b NOT LIKE 'y%'", ["a", "b"]),
    ("hll_sketch_estimate(unbase64(v))", ["v"]), ("named_struct('k', a).k", ["a"]),
    ("first(a) IGNORE NULLS", ["a"]), ("collect_list(a) FILTER (WHERE b > 1)", ["a", "b"]),
]


@pytest.mark.parametrize("text,columns", VALID, ids=[t for t, _ in VALID])
def test_spark_sql_that_spark_parses_is_accepted_with_its_columns(text, columns):
    assert [c.name for c in sql_columns(text)] == columns


def test_column_offsets_point_at_the_name():
    text = "upper(regoin) || lower(x)"
    assert [(c.name, text[c.offset:c.offset + len(c.name)]) for c in sql_columns(text)] == [
        ("regoin", "regoin"), ("x", "x")]


@pytest.mark.parametrize(
    "text,where,problem",
    [
        ("upper(region))", "column 14", "unexpected ')'"),
        ("upper(", "column 6", "incomplete expression near '('"),
        ("a = = b", "column 5", "incomplete expression near '='"),
        ("(a + b", "column 6", "expected ) near 'b'"),
        ("case when a then 1", "column 18", "expected END after CASE near '1'"),
        ("concat(a, 'x)", "column 11", "a quote is not closed"),
        ("a, b", "column 1", "expected one expression"),
        ("a WHERE b", "column 3", "expected one expression, not a query (WHERE ...)"),
        ("SELECT a FROM t", "column 1", "unexpected 'SELECT'"),
        ("a\n  + b +", "line 2, column 7", "incomplete expression near '+'"),
    ],
)
def test_syntax_errors_say_where_and_why(text, where, problem):
    _, at, said = _refusal(text)
    assert at == where
    assert said.startswith(problem), said


def _refusal(text: str) -> tuple[str, str, str]:
    """(kind, position, problem) of the SqlSyntaxError ``text`` raises."""
    with pytest.raises(SqlSyntaxError) as info:
        sql_columns(text)
    return info.value.kind, position(text, info.value.offset), info.value.problem


@pytest.mark.parametrize(
    "text", ["bigint", "LONG", "string", "decimal(10,2)", "array<string>", "map<string, int>",
             "struct<a: int, `b c` string NOT NULL COMMENT 'x'>", "variant", "timestamp_ntz",
             "interval day to second", "string collate UTF8_LCASE", "array<struct<a:int>>"])
def test_spark_types_are_accepted(text):
    assert type_problem(text) is None


#: Type names Spark refuses -> why.
WRONG_TYPES = {
    "bigitn": "bigitn is not a Spark SQL type; did you mean bigint?",
    "bool": "bool is not a Spark SQL type; did you mean boolean?",
    "json": "json is not a Spark SQL type",
    "array<strin>": "array<strin>: strin is not a Spark SQL type; did you mean string?",
    "array<int": "array<int: expected > at the end",
    "map<string>": "map<string>: expected , before >",
    "decimal(x)": "decimal(x): expected a number before x",
}


@pytest.mark.parametrize("text,problem", WRONG_TYPES.items())
def test_wrong_spark_types_say_why(text, problem):
    assert type_problem(text) == problem


@pytest.mark.parametrize(
    "text,where,problem",
    [
        ("uppr(region)", "column 1", "uppr; did you mean upper?"),
        ("concat(a, strftime(b, '%Y'))", "column 11", "strftime (not one of Spark's built-ins)"),
        ("coalesce(a, 0) + SUMM(b)", "column 18", "SUMM; did you mean sum?"),
        ("transform(arr, x -> to_jsn(x))", "column 21", "to_jsn; did you mean to_json?"),
    ],
)
def test_a_function_spark_lacks_is_named_with_the_closest_one(text, where, problem):
    assert _refusal(text) == ("unknown function", where, problem)


def test_a_qualified_function_is_left_to_spark():
    assert [c.name for c in sql_columns("my_catalog.my_db.score(a)")] == ["a"]


@pytest.mark.spark
def test_the_function_names_are_the_running_sparks(spark):
    listed = {r[0] for r in spark.sql("SHOW FUNCTIONS").collect()}
    names = {n for n in listed if n.replace("_", "a").isalnum() and not n[0].isdigit()}
    assert names - SPARK_FUNCTIONS == set(), "new in this Spark: add them to sqe/lang/spark_names.py"
    assert SPARK_FUNCTIONS - names == set(), "gone from this Spark: drop them from spark_names.py"


@pytest.mark.parametrize("text", ["NOT " * 600 + "a", "(" * 400 + "a" + ")" * 400,
                                  "upper(" * 300 + "a" + ")" * 300,
                                  "CASE WHEN a THEN " * 300 + "1" + " END" * 300])
def test_strings_nested_too_deeply_to_parse_are_syntax_errors(text):
    with pytest.raises(SqlSyntaxError, match="it nests too deeply to be read"):
        sql_columns(text)
