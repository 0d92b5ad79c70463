"""Deserializers: identity passes a batch through; json turns each top-level key into a typed column.

``top_level_fields`` parses the OBJECT type strings of ``schema_of_variant_agg``; ``deserialize``
with ``json`` types fields per batch (nested values stay VARIANT, all-NULL keys are strings),
adds NULL string columns for wanted names, never lets a JSON key replace a source column, and
counts but keeps values that are not JSON; declared fields are extracted as their declared
types.  The Kafka state's ``to_json(struct(...))`` of a VARIANT field is checked too.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from sqe.source.deserializers import (
    Deserialized,
    Summary,
    deserialize,
    summary_columns,
    top_level_fields,
)

pytestmark = pytest.mark.spark

#: What Spark's schema_of_variant_agg returned for a batch of this project's test values.
SPARK_SCHEMA = "OBJECT<a: DECIMAL(21,1), b: STRING, d: OBJECT<e: ARRAY<BIGINT>>, n: VOID, z: BOOLEAN>"


def batch(spark, *values):
    """A batch like the source's: binary ``_value`` (dicts as JSON), ``_offset`` and ``_key``."""
    rows = [
        (json.dumps(v).encode() if isinstance(v, (dict, list)) else v, 100 + i, f"k{i}")
        for i, v in enumerate(values)
    ]
    return spark.createDataFrame(rows, "_value binary, _offset bigint, _key string")


def column(frame, name):
    return [row[name] for row in frame.select(F.col(f"`{name}`")).collect()]


# -- top_level_fields ------------------------------------------------------------------------


def test_top_level_fields_of_a_spark_schema():
    assert top_level_fields(SPARK_SCHEMA) == [
        ("a", "DECIMAL(21,1)"),
        ("b", "STRING"),
        ("d", "OBJECT<e: ARRAY<BIGINT>>"),
        ("n", "VOID"),
        ("z", "BOOLEAN"),
    ]


def test_top_level_fields_keeps_nested_types_whole():
    text = ("OBJECT<a: OBJECT<b: DECIMAL(10,2), c: ARRAY<OBJECT<d: STRING, e: BIGINT>>>, "
            "f: ARRAY<ARRAY<DECIMAL(5,1)>>, g: VARIANT>")
    assert top_level_fields(text) == [
        ("a", "OBJECT<b: DECIMAL(10,2), c: ARRAY<OBJECT<d: STRING, e: BIGINT>>>"),
        ("f", "ARRAY<ARRAY<DECIMAL(5,1)>>"),
        ("g", "VARIANT"),
    ]


def test_top_level_fields_unquotes_backticked_names():
    text = "OBJECT<```q```: BIGINT, `a b.c`: STRING, `x`: BOOLEAN>"
    assert top_level_fields(text) == [("`q`", "BIGINT"), ("a b.c", "STRING"), ("x", "BOOLEAN")]


@pytest.mark.parametrize("text, expected", [
    ("object<a: bigint>", [("a", "bigint")]),
    ("  OBJECT<a: BIGINT>  ", [("a", "BIGINT")]),
    ("OBJECT<a: BIGINT,>", [("a", "BIGINT")]),
    ("OBJECT<>", []),
])
def test_top_level_fields_is_lenient_about_case_and_spaces(text, expected):
    assert top_level_fields(text) == expected


@pytest.mark.parametrize("text", ["VARIANT", "", "ARRAY<BIGINT>", "BIGINT", "OBJECT<", "STRING"])
def test_top_level_fields_of_a_non_object_is_empty(text):
    assert top_level_fields(text) == []


# -- identity --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [None, "identity"])
def test_identity_returns_the_frame_unchanged(spark, kind):
    frame = batch(spark, {"a": 1}, b"not json")
    result = deserialize(frame, kind, ["a", "missing"])
    assert isinstance(result, Deserialized)
    assert result.frame is frame
    assert result.unparseable_values == 0


def test_an_unknown_deserializer_is_a_value_error(spark):
    with pytest.raises(ValueError, match="unknown deserializer 'xml'"):
        deserialize(batch(spark, {"a": 1}), "xml")


# -- json ------------------------------------------------------------------------------------


def test_json_adds_one_typed_column_per_top_level_key(spark):
    frame = batch(
        spark,
        {"a": 1.5, "b": "x", "d": {"e": [1, 2]}, "n": None, "z": True, "i": 5},
        b'{"a": 12345678901234567890.5, "b": "y", "i": 9999999999999, "l": [1, "two"]}',
    )
    out = deserialize(frame, "json")
    assert out.unparseable_values == 0
    assert out.frame.columns == ["_value", "_offset", "_key", "a", "b", "d", "i", "l", "n", "z"]
    types = dict(out.frame.dtypes)
    assert types["a"] == "decimal(21,1)"
    assert types["i"] == "bigint"
    assert types["b"] == "string"
    assert types["z"] == "boolean"
    assert types["d"] == types["l"] == "variant"  # nested object and array stay VARIANT
    assert types["n"] == "string"  # NULL in every value
    rows = out.frame.drop("_value", "d", "l").collect()
    assert [tuple(r) for r in rows] == [
        (100, "k0", Decimal("1.5"), "x", 5, None, True),
        (101, "k1", Decimal("12345678901234567890.5"), "y", 9999999999999, None, None),
    ]


def test_json_types_are_inferred_per_batch(spark):
    ints = deserialize(batch(spark, {"v": 1}, {"v": 2}), "json").frame
    strings = deserialize(batch(spark, {"v": "1"}, {"v": "x"}), "json").frame
    mixed = deserialize(batch(spark, {"v": 1}, {"v": "x"}), "json").frame
    assert dict(ints.dtypes)["v"] == "bigint" and column(ints, "v") == [1, 2]
    assert dict(strings.dtypes)["v"] == "string" and column(strings, "v") == ["1", "x"]
    assert dict(mixed.dtypes)["v"] == "variant"
    texts = [r[0] for r in mixed.select(F.to_json(F.struct("v"))).collect()]
    assert texts == ['{"v":1}', '{"v":"x"}']


def test_json_nested_variant_fields_serialise_with_to_json(spark):
    frame = batch(spark, {"d": {"e": [1, 2], "f": {"g": "h"}}, "arr": [1, "x", None], "s": "t"},
                  {"s": "only"})
    out = deserialize(frame, "json").frame
    # What the Kafka state does to build a record's JSON value.
    values = out.select(F.to_json(F.struct("d", "arr", "s")).cast("binary").alias("v")).collect()
    decoded = [json.loads(bytes(r["v"])) for r in values]
    assert decoded == [{"d": {"e": [1, 2], "f": {"g": "h"}}, "arr": [1, "x", None], "s": "t"},
                       {"s": "only"}]
    assert [r[0] for r in out.select(F.to_json(F.struct("d"))).collect()] == [
        '{"d":{"e":[1,2],"f":{"g":"h"}}}', "{}"]


def test_json_wanted_names_missing_from_the_batch_are_null_strings(spark):
    frame = batch(spark, {"a": 1}, {"a": 2, "b": True})
    out = deserialize(frame, "json", ["zeta", "a", "alpha", "zeta", "_offset", "b"])
    assert out.frame.columns == ["_value", "_offset", "_key", "a", "b", "zeta", "alpha"]
    types = dict(out.frame.dtypes)
    assert types["zeta"] == types["alpha"] == "string"
    assert types["a"] == "bigint" and types["b"] == "boolean"
    assert [tuple(r) for r in out.frame.select("a", "b", "zeta", "alpha").collect()] == [
        (1, None, None, None), (2, True, None, None)]


def test_json_declared_fields_are_extracted_as_their_types_alone(spark):
    frame = batch(spark, {"id": 7, "amount": "12", "extra": 1}, {"id": "x", "amount": 3.0},
                  b"not json")
    out = deserialize(frame, "json", ["id"], {"id": "string", "amount": "bigint", "gone": None})
    assert out.unparseable_values == 1
    assert out.frame.columns == ["_value", "_offset", "_key", "id", "amount", "gone"]
    assert dict(out.frame.dtypes) == {"_value": "binary", "_offset": "bigint",
                                           "_key": "string", "id": "string",
                                           "amount": "bigint", "gone": "string"}
    assert [tuple(r) for r in out.frame.select("id", "amount").collect()] == [
        ("7", 12), ("x", 3), (None, None)]
    typed = deserialize(batch(spark, {"v": 1, "w": "a"}), "json", (), {"v": None, "w": "string"})
    assert typed.frame.dtypes[-2:] == [("v", "bigint"), ("w", "string")]


def test_json_keys_never_override_source_columns(spark):
    frame = batch(spark, {"_offset": 99, "_key": "from json", "_value": "x", "_sqe_json": 1, "a": 1})
    out = deserialize(frame, "json", ["_offset"])
    assert out.frame.columns == ["_value", "_offset", "_key", "a"]
    assert dict(out.frame.dtypes)["_offset"] == "bigint"
    row = out.frame.first()
    assert (row["_offset"], row["_key"], row["a"]) == (100, "k0", 1)
    assert json.loads(bytes(row["_value"]))["_value"] == "x"  # still the source bytes


def test_json_keeps_the_carried_columns_of_the_runner(spark):
    frame = (batch(spark, {"a": 1}, {"a": 2})
             .withColumn("_sqe_pid", F.lit(7).cast("long"))
             .withColumn("_sqe_partition", F.lit(0))
             .withColumn("_sqe_offset", F.col("_offset")))
    out = deserialize(frame, "json").frame
    assert out.columns == [*frame.columns, "a"]
    assert [tuple(r) for r in out.select("_sqe_pid", "_sqe_offset", "a").collect()] == [
        (7, 100, 1), (7, 101, 2)]


def test_json_counts_but_keeps_values_that_are_not_json(spark):
    frame = batch(spark, {"a": 1, "b": "x"}, b"not json", None, b'{"a": 2', {"a": 3})
    out = deserialize(frame, "json", ["c"])
    assert out.unparseable_values == 2  # a NULL value is not counted
    rows = out.frame.select("_offset", "a", "b", "c").collect()
    assert [tuple(r) for r in rows] == [
        (100, 1, "x", None), (101, None, None, None), (102, None, None, None),
        (103, None, None, None), (104, 3, None, None)]


def test_json_batch_of_only_unparseable_values(spark):
    out = deserialize(batch(spark, b"nope", b"{"), "json", ["a"])
    assert out.unparseable_values == 2
    assert out.frame.columns == ["_value", "_offset", "_key", "a"]
    assert column(out.frame, "a") == [None, None]


def test_json_empty_batch(spark):
    frame = spark.createDataFrame([], "_value binary, _offset bigint")
    out = deserialize(frame, "json", ["a", "b"])
    assert out.unparseable_values == 0
    assert out.frame.columns == ["_value", "_offset", "a", "b"]
    assert out.frame.count() == 0


def test_json_keys_with_dots_spaces_and_backticks(spark):
    out = deserialize(batch(spark, {"a.b": 1, "my key": "v", "`q`": True}), "json").frame
    assert out.columns[3:] == ["`q`", "a.b", "my key"]
    row = out.first()
    assert (row["a.b"], row["my key"], row["`q`"]) == (1, "v", True)


# -- regressions: problems found and fixed -----------------------------------------------


def test_a_key_with_a_quote_does_not_fail_the_batch(spark):
    out = deserialize(batch(spark, {"it's": 1, "b": 2}), "json").frame
    assert column(out, "it's") == [1] and column(out, "b") == [2]


@pytest.mark.parametrize("name", ["x,y", "a:b", "c<d"])
def test_top_level_fields_of_backticked_names_with_separators(name):
    assert top_level_fields(f"OBJECT<`{name}`: BIGINT, z: STRING>") == [(name, "BIGINT"), ("z", "STRING")]


@pytest.mark.parametrize("name", ["x,y", "a:b"])
def test_json_key_with_a_separator(spark, name):
    out = deserialize(batch(spark, {name: 1, "z": "s"}), "json").frame
    assert out.columns == ["_value", "_offset", "_key", name, "z"]


@pytest.mark.parametrize("other", [b"[1, 2]", b'"text"', b"42"])
def test_one_non_object_value_does_not_erase_the_fields_of_the_others(spark, other):
    out = deserialize(batch(spark, {"a": 1}, other), "json").frame
    assert "a" in out.columns
    assert column(out, "a") == [1, None]


def test_a_key_differing_in_case_from_a_source_column_does_not_shadow_it(spark):
    out = deserialize(batch(spark, {"_OFFSET": 5, "a": 1}), "json").frame
    assert column(out, "_offset") == [100]


def test_a_wanted_name_differing_in_case_from_a_key_is_not_ambiguous(spark):
    out = deserialize(batch(spark, {"userName": "ann"}), "json", ["username"]).frame
    out.select("username").collect()


# -- the summary computed in the batch's first job -----------------------------------------------


def _summarised(frame, groups_of, declared=None):
    """``deserialize`` given the summary that ``summary_columns`` computes per group of
    ``groups_of`` (a column), as the batch's first job computes it per (pid, partition)."""
    rows = frame.groupBy(groups_of).agg(*summary_columns("json", declared)).collect()
    return Summary.of_groups(rows), rows


@pytest.mark.parametrize("values", [
    [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, None, b"not json", {"a": 3, "b": "z"}],
    [{"a": 1}, {"a": 2.5}, [1, 2], {"a": 3, "c": True}, None],
    [None, b"still not json"],
])
def test_the_summary_of_the_groups_reads_the_batch_as_the_whole_batch_inference_does(spark,
                                                                                     values):
    frame = batch(spark, *values)
    whole = deserialize(frame, "json", wanted=["a", "q"])
    summary, rows = _summarised(frame, F.col("_offset") % 2)
    if summary is None:  # the groups' schemas differ: the deserializer infers over the whole
        assert len({r["_sqe_json_schema"] for r in rows} - {"VOID"}) > 1
        return
    given = deserialize(frame, "json", wanted=["a", "q"], summary=summary)
    assert given.unparseable_values == whole.unparseable_values
    assert (given.types, given.present, given.missing) == (whole.types, whole.present,
                                                             whole.missing)
    assert given.frame.collect() == whole.frame.collect()


def test_groups_whose_schemas_differ_leave_the_schema_to_the_whole_batch(spark):
    frame = batch(spark, {"a": 1}, {"a": "text"})
    summary, _ = _summarised(frame, F.col("_offset"))
    assert summary is None


def test_groups_without_an_object_do_not_hide_the_schema_of_the_others(spark):
    frame = batch(spark, {"a": 1}, None, b"x", {"a": 2})
    summary, _ = _summarised(frame, F.col("_offset") % 2)
    assert summary == Summary("OBJECT<a: BIGINT>", 1)


def test_declared_typed_fields_need_no_schema_from_the_summary(spark):
    frame = batch(spark, {"a": 1}, b"x")
    summary, _ = _summarised(frame, F.col("_offset"), declared={"a": "int"})
    assert summary == Summary(None, 1)
    des = deserialize(frame, "json", declared={"a": "int"}, summary=summary)
    assert column(des.frame, "a") == [1, None] and des.unparseable_values == 1
