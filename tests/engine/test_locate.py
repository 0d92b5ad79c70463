"""Finding the records behind a failed batch by bisection (sqe.engine.batch.bad_records.locate)."""

from __future__ import annotations

import math

import pytest
from pyspark.sql import functions as F

from sqe.engine.batch.bad_records import StepFailure, locate, records_at, without

pytestmark = [pytest.mark.spark]


def _batch(spark, n: int):
    rows = [("t", p, o, None, None, b"v%d" % o) for p in (0, 1) for o in range(n)]
    return spark.createDataFrame(rows, "_topic string, _partition int, _offset long, "
                                       "_index int, _key binary, _value binary")


def test_each_bad_record_is_found_in_about_log2_jobs(spark):
    frame = _batch(spark, 200).cache()
    bad = {(0, 17), (1, 150), (1, 151)}
    calls = []

    def evaluate(part):
        calls.append(1)
        cond = F.lit(False)
        for p, o in bad:
            cond = cond | ((F.col("_partition") == p) & (F.col("_offset") == o))
        hit = part.where(cond).orderBy("_partition", "_offset").limit(1).collect()
        if hit:
            raise StepFailure("query 1", f"value at {hit[0]['_offset']} cannot be cast")

    found = locate(frame, evaluate, 10)
    assert {(b.partition, b.offset) for b in found} == bad
    assert found[0].reason == "query 1: value at 17 cannot be cast" and found[0].value == b"v17"
    assert len(calls) <= len(bad) * (math.ceil(math.log2(400)) + 2)
    assert without(frame, found).count() == 397
    assert locate(frame, evaluate, 1)[0].offset == 17  # fail names the first and stops


def test_a_failure_of_several_records_together_names_none(spark):
    frame = _batch(spark, 50).cache()

    def evaluate(part):
        if part.where(F.col("_offset").isin(3, 40) & (F.col("_partition") == 0)).count() == 2:
            raise StepFailure("query 1", "sum overflows")

    assert locate(frame, evaluate, 10) == []


def test_records_at_reads_the_carried_offsets_of_a_query_output(spark):
    frame = _batch(spark, 10)
    (record,) = records_at(frame, [(1, 4)], "Postgres state t: NUL", 5)
    assert (record.partition, record.offset, record.value, record.where()) == (
        1, 4, b"v4", "t/1 offset 4")
