"""sqe.wire.avro_write: the writer schema of Spark types, as Spark's to_avro derives it; a
batch of rows encoded equal to the row-at-a-time reference, and read back as they were."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from sqe.errors import SchemaError
from sqe.wire.arrays import binaries
from sqe.wire.avro import AvroDecoder, spark_type
from sqe.wire.avro_write import AvroEncoder, avro_schema, encode_reference

STRUCT = StructType([
    StructField("id", StringType(), False),
    StructField("n", LongType(), True),
    StructField("price", DecimalType(9, 2), True),
    StructField("tags", ArrayType(StringType(), True), True),
    StructField("attrs", MapType(StringType(), IntegerType(), True), True),
    StructField("geo", StructType([StructField("country", StringType(), True)]), True),
])


def test_the_derived_schema_reads_back_as_the_same_spark_types():
    text = avro_schema(STRUCT, "sqe.clicks_out")
    schema = json.loads(text)
    assert (schema["name"], schema["namespace"]) == ("clicks_out", "sqe")
    assert schema["fields"][1] == {"name": "n", "type": ["null", "long"], "default": None}
    assert spark_type(text).simpleString() == STRUCT.simpleString()


def test_a_type_avro_has_none_for_is_refused_naming_the_field():
    bad = StructType([StructField("m", MapType(LongType(), LongType()))])
    with pytest.raises(SchemaError, match="m: a map with bigint keys has no Avro type"):
        avro_schema(bad, "sqe.x")


_rows = st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "id": st.text(max_size=5), "n": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    "price": st.one_of(st.none(), st.decimals(-10**6, 10**6, places=2, allow_nan=False,
                                              allow_infinity=False)),
    "tags": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=3)),
                                          max_size=3)),
    "attrs": st.one_of(st.none(), st.dictionaries(st.text(max_size=3),
                                                  st.one_of(st.none(), st.integers(0, 9)),
                                                  max_size=3)),
    "geo": st.one_of(st.none(), st.fixed_dictionaries({"country": st.one_of(
        st.none(), st.text(max_size=3))}))})), max_size=20)


@settings(max_examples=100, deadline=None)
@given(_rows, st.sampled_from([None, 7]))
def test_a_batch_encodes_as_the_reference_and_reads_back(rows, schema_id):
    text = avro_schema(STRUCT, "sqe.out")
    arrow = AvroDecoder(text).arrow
    encoder = AvroEncoder(text, schema_id, arrow)
    array = pa.array([None if r is None else {**r, "attrs": None if r["attrs"] is None
                                              else list(r["attrs"].items())} for r in rows],
                     type=arrow)
    got = encoder.encode(array)
    assert got.to_pylist() == encode_reference(encoder, array.to_pylist())
    got.validate(full=True)
    decoder = AvroDecoder(text, {7: ("AVRO", text)}.get if schema_id else None)
    back = decoder.decode(got)
    assert not back.bad
    assert back.values.to_pylist() == array.to_pylist()


def test_logical_types_round_trip():
    struct = StructType([StructField("d", spark_type('{"type": "record", "name": "x", "fields": '
                                                     '[{"name": "a", "type": "int"}]}'))])
    assert avro_schema(struct, "x")  # a nested record gets a name of its own
    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType
    times = StructType([StructField("d", DateType()), StructField("t", TimestampType()),
                        StructField("l", TimestampNTZType()), StructField("m", DecimalType(5, 1))])
    text = avro_schema(times, "sqe.times")
    row = {"d": date(2026, 11, 29), "t": datetime(2026, 11, 29, 1, tzinfo=timezone.utc),
           "l": datetime(2026, 11, 29, 2), "m": Decimal("1.5")}
    decoder = AvroDecoder(text)
    array = pa.array([row], type=decoder.arrow)
    encoded = AvroEncoder(text, None, decoder.arrow).encode(array)
    assert decoder.decode(binaries(encoded.to_pylist())).values.to_pylist() == [row]
