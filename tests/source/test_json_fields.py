"""The source's reading of declared JSON fields (sqe.source.json_fields): the vectorised kernel
against its value-at-a-time reference over hostile values, both against Spark's own reading
(the JSON deserializer without the source's columns), the parse budget, the tally rows, and the
``jsonFields`` option's one-sentence refusals."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.errors import SourceError
from sqe.source import json_fields
from sqe.source.deserializers import DUPLICATE_KEYS, deserialize, read_in_source
from sqe.source.json_fields import (
    MAX_PARSES,
    OK,
    arrow_fields,
    json_column,
    read_fields,
    read_fields_reference,
    schema_with,
    with_fields,
)
from sqe.source.kafka.config import SourceConfig
from sqe.wire.arrays import binaries
from sqe.wire.columns import ARROW_SCHEMA, SCHEMA, Tally, record_batch

FIELDS = (("id", "string"), ("n", "bigint"), ("i", "int"), ("flag", "boolean"))

#: Values each reader may take differently: every one must read alike (or go to Spark).
HOSTILE: list[bytes | None] = [
    b'{"id": "a", "n": 1, "i": 2, "flag": true}', b'{}', b' \t{"n": -0}', b'{"n": null}',
    b'{"n": "12"}', b'{"n": 12.0}', b'{"n": 1e2}', b'{"n": 9223372036854775807}',
    b'{"n": 9223372036854775808}', b'{"n": -9223372036854775808}', b'{"i": 2147483648}',
    b'{"id": 12}', b'{"id": {"a": 1}}', b'{"id": [1]}', b'{"id": true}', b'{"flag": "true"}',
    b'{"flag": 1}', b'{"id": "a", "id": "b"}', b'{"x": 1, "x": 2, "n": 3}',
    b'{"x": {"y": 1, "y": 2}, "n": 4}', b'{"x": NaN, "n": 5}', b'{"x": -Infinity}',
    b'{"x": Inf}', b'{"id": "NaN"}', b'{"x": 1e999}', b'{"id": "\\ud83d"}',
    b'{"id": "\\u00e9\\ud83d\\ude00"}', b'{"id": "\xff"}', b'{"x": "\xff", "n": 6}',
    b'{"id": "\xc3\xa9"}', b'{"id": "a\tb"}', b'{"id": "a\x01b"}', b'{"id": "\\u0000"}',
    b'{"n": 1}\n', b'{"n": 1}\r', b'{\n"n": 1}', b'{"n": 1}{"n": 2}', b'{"n": 1} x',
    b'{"n": 01}', b'{"n": +1}', b'{"n": 1,}', b"{'n': 1}", b'[1]', b'5', b'"s"', b'null',
    b'', b' ', None, b'\xef\xbb\xbf{"n": 7}', b'x{"n": 1}', b'{"n": 1}\x0b', b'{"n": 1}\x00',
    b'{"ID": "upper"}', b'{"x": [[[[[[[[[[]]]]]]]]]], "n": 8}', b'{"x": ' + b'1' * 990 + b'}',
    b'{"id": "' + b'a' * 2000 + b'"}', b'{"x": 123456789012345678901234567890, "n": 9}',
]


def _equal_to_reference(values: list[bytes | None]) -> None:
    ok, columns = read_fields(binaries(values), FIELDS, budget=10**6)
    ref_ok, ref_columns = read_fields_reference(values, FIELDS)
    assert ok.to_pylist() == ref_ok
    assert [c.to_pylist() for c in columns] == ref_columns


def test_the_kernel_reads_hostile_values_as_its_reference():
    _equal_to_reference(HOSTILE)
    ok, _ = read_fields(binaries(HOSTILE), FIELDS, budget=10**6)
    assert 5 < sum(ok.to_pylist()) < len(HOSTILE) - 20  # both kinds are there


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(HOSTILE),
    st.dictionaries(st.sampled_from(["id", "n", "i", "flag", "x"]),
                    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                              st.text(max_size=8), st.floats(allow_nan=False))
                    ).map(lambda d: json.dumps(d, ensure_ascii=False).encode())), max_size=40))
def test_the_kernel_reads_generated_values_as_its_reference(values):
    _equal_to_reference(values)


def test_a_batch_arrow_refuses_costs_at_most_the_budget(monkeypatch):
    calls = []
    parse = json_fields._parse
    monkeypatch.setattr(json_fields, "_parse", lambda *a: calls.append(1) or parse(*a))
    values = [b'{"n": "%d"}' % i for i in range(5000)]  # a string where a bigint is declared
    ok, columns = read_fields(binaries(values), FIELDS)
    assert not any(ok.to_pylist()) and columns[1].null_count == 5000
    assert len(calls) == MAX_PARSES
    calls.clear()
    mixed = [b'{"n": %d}' % i for i in range(4096)]
    mixed[1000] = b'{"n": "x"}'
    ok, columns = read_fields(binaries(mixed), FIELDS)
    assert ok.to_pylist() == [i != 1000 for i in range(4096)]
    assert columns[1].to_pylist()[999:1002] == [999, None, 1001]
    assert len(calls) <= 2 * 13 + 1  # halving finds the one value


def test_tally_rows_and_the_schema():
    batch = with_fields(Tally(replays_dropped=2).row("t", 0), FIELDS)
    assert batch.column(OK).to_pylist() == [None]
    assert batch.column(json_column("n")).type == pa.int64()
    schema = schema_with(SCHEMA, FIELDS)
    assert schema.fieldNames()[len(SCHEMA.fields):] == [OK, *[json_column(n) for n, _ in FIELDS]]
    assert schema_with(SCHEMA, ()) is SCHEMA
    rows = with_fields(record_batch(2, {"_offset": pa.array([1, 2]),
                                        "_value": binaries([b'{"n": 3}', b'[]'])}), FIELDS)
    assert rows.column(OK).to_pylist() == [True, False]
    assert rows.schema.names[:len(ARROW_SCHEMA)] == ARROW_SCHEMA.names


def test_the_option_and_the_declared_types():
    cfg = SourceConfig.from_options({"topic": "t", "jsonFields": '{"id": "STRING", "n": "long"}'})
    assert cfg.json_fields == (("id", "string"), ("n", "long"))
    assert SourceConfig.from_options(cfg.to_options()).json_fields == cfg.json_fields
    with pytest.raises(SourceError, match=r"jsonFields field 'd' has type 'double'; the reader"):
        SourceConfig.from_options({"topic": "t", "jsonFields": '{"d": "double"}'})
    with pytest.raises(SourceError, match="jsonFields must be a JSON object"):
        SourceConfig.from_options({"topic": "t", "jsonFields": "[1]"})
    assert arrow_fields({"a": "STRING", "b": "bigint"}) == (("a", "string"), ("b", "bigint"))
    assert arrow_fields({"a": "string", "b": None}) is None
    assert arrow_fields({"a": "double"}) is None
    assert arrow_fields({"Id": "string", "id": "string"}) is None
    with pytest.raises(SourceError, match="differ only in case"):
        SourceConfig.from_options({"topic": "t", "jsonFields": '{"Id": "string", "id": "int"}'})


@pytest.mark.spark
def test_spark_reads_every_value_as_the_source_does(spark):
    """The deserializer over the source's columns gives every record the fields and the
    bad-value mark that Spark's own reading gives it (the same frame without them)."""
    rows = HOSTILE + [json.dumps({"id": f"e{i}", "n": i, "i": -i, "flag": i % 2 == 0}).encode()
                      for i in range(50)]
    batch = with_fields(record_batch(len(rows), {
        "_value": binaries(rows), "_offset": pa.array(np.arange(len(rows)))}), FIELDS)
    declared = dict(FIELDS)
    spark.conf.set(DUPLICATE_KEYS, "true")
    try:
        frame = spark.createDataFrame(pa.Table.from_batches([batch]), schema=schema_with(SCHEMA, FIELDS))
        plain = frame.select(*SCHEMA.fieldNames())
        assert read_in_source(frame, FIELDS) and not read_in_source(plain, FIELDS)
        got, want = (deserialize(f, "json", declared=declared) for f in (frame, plain))
        assert got.frame.columns == [*want.frame.columns[:len(SCHEMA.fields)], OK,
                                     *want.frame.columns[len(SCHEMA.fields):]]
        names = ["_offset", *declared]

        def seen(d):
            return sorted(d.frame.select(*names, d.undecodable.alias("bad")).collect())
        assert seen(got) == seen(want)
        assert sum(r["bad"] for r in seen(got)) > 10
        spark.conf.set(DUPLICATE_KEYS, "false")
        assert not read_in_source(frame, FIELDS)
    finally:
        spark.conf.unset(DUPLICATE_KEYS)
