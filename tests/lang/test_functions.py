"""SQE's date, hash, map and aggregate functions on Spark, against hand-computed values."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqe.errors import TopologyError
from sqe.lang.compiler import compile_expression, compile_query
from sqe.lang.expressions import parse_expression
from sqe.lang.spark_functions import CompileContext
from sqe.lang.topology import Query, parse_commands
from sqe.wire.murmur import PID_SEED, hash_bytes, murmur64a, murmur64a_array
from tests.support import ROOT

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc


def run(frame, **raws):
    ctx = CompileContext(frame)
    cols = [compile_expression(parse_expression(r), n, ctx).alias(n) for n, r in raws.items()]
    rows = frame.select(*cols).collect()
    return {n: [row[n] for row in rows] for n in raws}


@pytest.fixture(scope="module")
def dates(spark):
    return spark.createDataFrame(
        [("2015-05-01 13:47", ), ("1970-01-01 00:00",), ("not a date",), (None,)], "s string")


def _ts(*args) -> dt.datetime:
    return dt.datetime(*args)  # Spark returns naive datetimes in the session zone (UTC)


def test_parse_format_and_get_time_in_utc(dates):
    got = run(dates, p={"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]},
              f={"FormatDate": [{"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]},
                                {"C": "yyyy-MM-dd"}]},
              g={"GetTime": ["s", {"C": "yyyy-MM-dd HH:mm"}]},
              g1={"GetTime": [{"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]}]})
    assert got["p"] == [_ts(2015, 5, 1, 13, 47), _ts(1970, 1, 1), None, None]
    assert got["f"] == ["2015-05-01", "1970-01-01", None, None]
    assert got["g"] == got["g1"] == [1430488020000, 0, None, None]


def test_unparseable_dates_are_null_and_counted_not_a_crash(spark, dates):
    (q,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "fields": ["d"]},
        "select": {"expressions": [{"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]}]},
        "from": {"objectName": "i"}}}], "t.yaml")
    assert isinstance(q, Query)
    parts = compile_query(q, dates, "t.yaml: command 1 (Query)")
    assert parts.frame.count() == 4
    assert parts.warning_counts() == {"unparseable_dates": 1}  # NULL input is not a warning


def test_round_date_floors_to_multiples_of_the_unit(spark):
    frame = spark.sql("SELECT timestamp'1970-01-01 00:01:45.005' AS a, "
                      "timestamp'1970-01-05 10:01:00' AS b, CAST(NULL AS timestamp) AS c")
    got = run(frame, s={"RoundDate": ["a", 10, {"C": "second"}]},
              m={"RoundDate": ["a", 1, {"C": "Minute"}]}, h={"RoundDate": ["b", 6, {"C": "hour"}]},
              d={"RoundDate": ["b", 2, {"C": "day"}]}, n={"RoundDate": ["c", 1, {"C": "day"}]})
    assert got == {"s": [_ts(1970, 1, 1, 0, 1, 40)], "m": [_ts(1970, 1, 1, 0, 1)],
                   "h": [_ts(1970, 1, 5, 6)], "d": [_ts(1970, 1, 5)], "n": [None]}


@pytest.mark.parametrize("raw,message", [
    ({"RoundDate": ["a", 1, {"C": "week"}]}, "unit 'week' is not one of second, minute"),
    ({"RoundDate": ["a", 0, {"C": "day"}]}, "the amount must be a whole number >= 1"),
    ({"RoundDate": ["a", "n", {"C": "day"}]}, "the amount must be a constant"),
    ({"FormatDate": ["a", {"C": "YYYY-ww"}]}, "uses Y, w, which Spark's datetime patterns"),
    ({"Hash": [{"C": "md5"}, "a"]}, "algorithm 'md5' is not supported"),
    ({"CreateHll": ["a", 30]}, "log2m must be a whole number 4..21"),
])
def test_bad_constant_arguments_are_located_errors(spark, raw, message):
    frame = spark.sql("SELECT timestamp'2020-01-01 00:00:00' AS a, 1 AS n")
    with pytest.raises(TopologyError, match=f"^t[ :].*{message}"):
        run(frame, t=raw)


def test_hash_is_sqes_murmur2_64_big_endian(spark):
    frame = spark.createDataFrame([("ABCDEF", b"ABCDEF", 42), (None, None, None)],
                                  "s string, b binary, n long")
    got = run(frame, s={"Hash": ["s"]}, a={"Hash": [{"C": "Murmur2"}, "s"]}, b={"Hash": ["b"]},
              n={"Hash": ["n"]})
    expected = bytes.fromhex("0F6106105304A543")  # SQE's HashTest vector
    assert got["s"] == got["a"] == got["b"] == [expected, None]
    assert got["n"] == [(murmur64a(b"42", PID_SEED) % 2**64).to_bytes(8, "big"), None]


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=50))
def test_vectorised_murmur_equals_the_scalar_reference(values):
    arr = pa.array(values, pa.binary())
    assert murmur64a_array(arr).tolist() == [murmur64a(v or b"", PID_SEED) % 2**64 for v in values]
    assert hash_bytes(arr).to_pylist() == [
        None if v is None else (murmur64a(v, PID_SEED) % 2**64).to_bytes(8, "big") for v in values]
    sliced = arr.slice(1) if len(arr) else arr
    assert murmur64a_array(sliced).tolist() == murmur64a_array(arr).tolist()[1:]
    assert np.asarray(murmur64a_array(arr)).dtype == np.uint64


def test_map_functions_on_maps_and_json_objects(spark):
    frame = spark.sql("SELECT map('b', 2, 'a', 1, 'c', 3) AS m, parse_json('{\"y\": \"Y\", "
                      "\"x\": 1}') AS v, CAST(NULL AS map<string,int>) AS z")
    got = run(frame, g={"GetMapValue": ["m", {"C": "a"}]}, miss={"GetMapValue": ["m", {"C": "q"}]},
              gv={"GetMapValue": ["v", {"C": "y"}]}, gz={"GetMapValue": ["z", {"C": "a"}]})
    assert (got["g"], got["miss"], got["gz"]) == ([1], [None], [None])
    assert str(got["gv"][0]) == '"Y"'
    assert run(frame, k={"ExpandKeys": ["m"]}) == {"k": ["a", "b", "c"]}
    assert run(frame, v={"ExpandValues": ["m"]}) == {"v": [1, 2, 3]}
    assert run(frame, k={"ExpandKeys": ["v"]}) == {"k": ["x", "y"]}
    assert run(frame, k={"ExpandKeys": ["z"]}) == {"k": []}  # no keys, no rows (as SQE)


def test_one_generator_per_select(spark):
    frame = spark.sql("SELECT map('a', 1) AS m")
    (q,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "fields": ["k", "v"]},
        "select": {"expressions": [{"ExpandKeys": ["m"]}, {"ExpandValues": ["m"]}]},
        "from": {"objectName": "i"}}}], "t.yaml")
    with pytest.raises(TopologyError, match="may appear once in a select"):
        compile_query(q, frame, "t")


def test_if_not_xor(spark):
    frame = spark.createDataFrame([(True, False), (False, None)], "a boolean, b boolean")
    got = run(frame, i={"If": ["a", {"C": "yes"}, {"C": "no"}]}, n={"Not": ["b"]},
              x={"Xor": ["a", True, True]})
    assert got == {"i": ["yes", "no"], "n": [True, None], "x": [True, False]}


def test_aggregating_query_groups_by_the_plain_fields(spark):
    frame = spark.createDataFrame(
        [("a", "u1", 1, 2.5), ("a", "u2", 2, 0.5), ("a", "u1", 3, None), ("b", None, 4, 1.0)],
        "k string, user string, n long, x double")
    (q,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "fields": ["k", "total", "most", "users", "users_p"]},
        "select": {"expressions": ["k", {"Sum": ["n"]}, {"Max": ["x"]}, {"CreateHll": ["user"]},
                                   {"CreateHllp": ["user", 12]}]},
        "from": {"objectName": "i"}}}], "t.yaml")
    parts = compile_query(q, frame, "t")
    assert parts.aggregates == {"total": "sum", "most": "max", "users": "createhll",
                                "users_p": "createhllp"}
    from pyspark.sql import functions as F
    rows = {r["k"]: r for r in parts.frame.select(
        "k", "total", "most", F.hll_sketch_estimate("users").alias("u"),
        F.hll_sketch_estimate("users_p").alias("up")).collect()}
    assert (rows["a"]["total"], rows["a"]["most"], rows["a"]["u"], rows["a"]["up"]) == (6, 2.5, 2, 2)
    assert (rows["b"]["total"], rows["b"]["most"], rows["b"]["u"]) == (4, 1.0, 0)


def test_aggregates_into_kafka_are_partition_local_with_the_largest_offset(spark):
    frame = spark.createDataFrame(
        [(9, 0, 10, "a", 1), (9, 0, 11, "a", 2), (9, 1, 5, "a", 3), (9, 0, 12, "b", 4)],
        "_sqe_pid long, _sqe_partition int, _sqe_offset long, k string, n long")
    (q,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "stateName": "KAFKA", "fields": ["k", "total"]},
        "select": {"expressions": ["k", {"Sum": ["n"]}]}, "from": {"objectName": "i"}}}], "t.yaml")
    rows = compile_query(q, frame, "t").frame.collect()
    got = sorted((r["_sqe_partition"], r["_sqe_offset"], r["k"], r["total"]) for r in rows)
    assert got == [(0, 11, "a", 3), (0, 12, "b", 4), (1, 5, "a", 3)]


def test_the_docs_table_has_every_catalogue_function():

    from sqe.lang.functions import FUNCTIONS

    text = (ROOT / "docs" / "topologies.md").read_text()
    table = text[text.index("| SQE | Spark | notes |"):text.index("Date patterns are Java's")]
    cells = {c.strip("`[] ").lower() for row in table.splitlines() if row.startswith("|")
             for c in row.split("|")[1].replace("(", " ").replace(",", " ").split()}
    missing = [n for n, s in FUNCTIONS.items()
               if not ({n, *(a.lower() for a in s.aliases)} & cells)]
    assert not missing, missing


def test_only_hash_plans_a_python_udf(spark):
    frame = spark.sql("SELECT '2020-01-01 10:00' AS s, map('a', 1) AS m, 'u' AS user, 3 AS n")
    (q,) = parse_commands([{"Query": {
        "insertInto": {"objectName": "o", "fields": ["d", "r", "t", "v", "total", "users"]},
        "select": {"expressions": [
            {"FormatDate": [{"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]}, {"C": "yyyy"}]},
            {"RoundDate": [{"ParseDate": ["s", {"C": "yyyy-MM-dd HH:mm"}]}, 1, {"C": "day"}]},
            {"GetTime": ["s", {"C": "yyyy-MM-dd HH:mm"}]}, {"GetMapValue": ["m", {"C": "a"}]},
            {"Sum": ["n"]}, {"CreateHll": ["user"]}]},
        "from": {"objectName": "i"}}}], "t.yaml")
    plan = compile_query(q, frame, "t").frame._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "ArrowEval" not in plan, plan
    hashed = run(frame, h={"Hash": ["s"]})
    assert len(hashed["h"][0]) == 8
