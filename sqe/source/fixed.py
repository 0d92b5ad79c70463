"""SQE's FIXED spout as a Spark streaming source: rows declared in the topology file.

``jw.sqe.spout.fixed.fields`` names the fields and ``jw.sqe.spout.fixed.values``
gives the rows.  As SQE's ``FixedBatchSpout`` (no cycling), every row is
emitted once, all in the first micro-batch; later batches are empty (a query
without a checkpoint starts at row ``start``, an option, 0 unless the run resumes
from the rows its stores hold already).  The rows come in the ``sqe-kafka``
schema (:data:`sqe.wire.columns.SCHEMA`) with each row as a JSON object in
``_value``, partition 0 and the row's position as ``_offset``, so the runner
treats a FIXED stream like a Kafka stream read with the ``json`` deserializer.

Example::

    >>> spark.dataSource.register(FixedSource)                  # doctest: +SKIP
    >>> (spark.readStream.format("sqe-fixed").option("name", "s")   # doctest: +SKIP
    ...     .option("fields", '["a"]').option("values", '[[1], [2]]').load())
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from sqe.errors import SourceError
from sqe.source.admission import SupportsTriggerAvailableNow
from sqe.wire.arrays import binaries, from_numpy, repeated
from sqe.wire.columns import SCHEMA, record_batch

__all__ = ["FIXED_SOURCE_NAME", "FixedSource", "fixed_options"]

FIXED_SOURCE_NAME = "sqe-fixed"


def fixed_options(name: str, fields: list[str], rows: list[list]) -> dict[str, str]:
    """The reader options of a FIXED stream."""
    return {"name": name, "fields": json.dumps(fields), "values": json.dumps(rows)}


@dataclass
class _Rows(InputPartition):
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.start, self.end))


class _FixedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, name: str, values: list[bytes], start: int = 0) -> None:
        self.name = name
        self.values = values
        self.start = start

    def initialOffset(self) -> dict:
        return {"rows": min(self.start, len(self.values))}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        return {"rows": len(self.values)}

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: the rows are all known."""

    def partitions(self, start: dict, end: dict) -> list[_Rows]:
        s, e = int(start["rows"]), int(end["rows"])
        return [_Rows(s, e)] if e > s else []

    def commit(self, end: dict) -> None:
        """Nothing to do."""

    def read(self, partition: _Rows) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        n = partition.end - partition.start
        columns = {
            "_value": binaries(self.values[partition.start:partition.end]),
            "_topic": repeated(self.name, n),
            "_partition": from_numpy(np.zeros(n, dtype=np.int32)),
            "_offset": from_numpy(np.arange(partition.start, partition.end, dtype=np.int64)),
        }
        yield record_batch(n, columns)


class FixedSource(DataSource):
    """The ``sqe-fixed`` data source (options ``name``, ``fields``, ``values`` as JSON)."""

    @classmethod
    def name(cls) -> str:
        return FIXED_SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> _FixedReader:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        try:
            fields = json.loads(opts["fields"])
            rows = json.loads(opts["values"])
        except (KeyError, ValueError) as exc:
            raise SourceError(f"sqe-fixed needs the options fields and values as JSON: {exc}"
                              ) from None
        values = []
        for i, row in enumerate(rows):
            if len(row) != len(fields):
                raise SourceError(f"sqe-fixed {opts.get('name')}: row {i + 1} has {len(row)} "
                                  f"value(s) for {len(fields)} field(s)")
            values.append(json.dumps(dict(zip(fields, row, strict=True))).encode())
        return _FixedReader(opts.get("name", "fixed"), values, int(opts.get("start", 0)))
