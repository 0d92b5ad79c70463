"""The rows a PySpark 4.0 stream writer is given, as record batches: the same as Spark's own
Arrow batches of them (what 4.1 and later give a ``DataSourceStreamArrowWriter``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqe.engine.spark import arrow_writer
from sqe.engine.spark.arrow_writer import row_batches

pytestmark = pytest.mark.spark


def test_rows_made_batches_equal_sparks_arrow_of_them(spark, monkeypatch):
    monkeypatch.setattr(arrow_writer, "BATCH_ROWS", 40)
    frame = spark.sql("""
        SELECT id, CAST(id AS INT) AS small, id / 3.0 AS ratio,
               IF(id % 7 = 0, NULL, CONCAT('e', id)) AS name,
               CAST(id * 1.25 AS DECIMAL(12, 2)) AS money,
               TIMESTAMP '2026-11-29 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS at,
               DATE '2026-01-01' + CAST(id % 300 AS INT) AS day,
               named_struct('a', id, 'b', IF(id % 2 = 0, NULL, 'odd')) AS inner,
               array(id, id + 1) AS pair, map('k', id) AS m, CAST(NULL AS BINARY) AS raw
        FROM range(85)""")
    made = pa.Table.from_batches(list(row_batches(iter(frame.collect()), frame.schema)))
    spark_own = frame.toArrow()
    assert made.num_rows == 85 and [b.num_rows for b in made.to_batches()] == [40, 40, 5]
    assert made.schema.names == spark_own.schema.names
    assert made.to_pylist() == spark_own.cast(made.schema).to_pylist()


def test_no_rows_are_no_batches(spark):
    frame = spark.sql("SELECT 1 AS n WHERE false")
    assert list(row_batches(iter([]), frame.schema)) == []
