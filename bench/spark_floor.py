"""Spark's own floor under a micro-batch: what a trigger costs with a Python source and nothing
of SQE's, per sink protocol and checkpoint file manager.

    PYTHONPATH=. .venv/bin/python bench/spark_floor.py [--seconds 30] [--rate 1000]
        [--config FILE.yaml] [--json]

A Python data source that invents ``--rate`` rows a second (two input partitions, no I/O) runs
as a streaming query with the default trigger (each batch as soon as the last ends) for
``--seconds``, into each of:

* ``writer``: a Python data source stream writer whose ``write`` counts its rows and whose
  ``commit`` does nothing (Spark's own sink protocol: one job, ``commit`` on the driver in a
  Python worker);
* ``foreachbatch``: ``foreachBatch`` running one ``mapInArrow`` job that counts the rows, its
  ``mapInArrow`` made each batch (the shape of SQE's one pass before its task function was
  planned with the stream, and of a batch over Spark Connect);
* ``foreachbatch-planned``: the same ``mapInArrow`` planned once with the stream, and
  ``foreachBatch`` collecting what it gives (the shape of SQE's one pass on classic Spark);
* ``writer-filecontext``: ``writer`` with Spark's default checkpoint file manager on a local
  disk (FileContext; SQE's runs use the FileSystem one there,
  :func:`sqe.engine.spark.checkpoint.use_file_system_manager`).

``--config`` gives the session a config file's ``Spark:`` map, as ``sqe run --config`` does
(``conf/low-latency.yaml``: the JVM's client compiler only).

Per variant: the medians of Spark's own trigger parts (``durationMs`` of the streaming
progress, after the first 5 triggers) and of the trigger.  Nothing of SQE runs in it, so it is
the least a trigger costs on this machine with a Python source: a bound no SQE change goes
under.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from bench.harness.report import parser
from sqe.config.settings import load_config
from sqe.engine.spark.checkpoint import FILE_MANAGER_SETTING, use_file_system_manager
from sqe.engine.spark.session import build_session

VARIANTS = ("writer", "foreachbatch", "foreachbatch-planned", "writer-filecontext")
_FILE_CONTEXT = ("org.apache.spark.sql.execution.streaming.checkpointing."
                 "FileContextBasedCheckpointFileManager")


_ROWS = pa.schema([("k", pa.int64()), ("v", pa.string())])  # typed also when a range is empty


class InventedRows(DataSource):
    """``rate`` rows a second, made up on the spot (the option ``rate``)."""

    @classmethod
    def name(cls) -> str:
        return "floor-rows"

    def schema(self) -> str:
        return "k long, v string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(float(self.options.get("rate", "1000")))


class _Reader(DataSourceStreamReader):
    def __init__(self, rate: float) -> None:
        self.rate, self.t0 = rate, time.time()

    def initialOffset(self) -> dict:
        return {"o": 0}

    def latestOffset(self) -> dict:
        return {"o": int((time.time() - self.t0) * self.rate)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        a, b = start["o"], end["o"]
        return [InputPartition((a, (a + b) // 2)), InputPartition(((a + b) // 2, b))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        a, b = partition.value
        yield pa.RecordBatch.from_pydict({"k": list(range(a, b)),
                                          "v": [str(i) for i in range(a, b)]}, schema=_ROWS)

    def commit(self, end: dict) -> None:
        return None


@dataclass
class _Count(WriterCommitMessage):
    rows: int


class CountingSink(DataSource):
    """A stream writer that counts rows and commits nothing."""

    @classmethod
    def name(cls) -> str:
        return "floor-count"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return _Writer()


class _Writer(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _Count(sum(1 for _ in iterator))

    def commit(self, messages: list, batchId: int) -> None:
        return None


def _count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})


def one(spark: SparkSession, variant: str, seconds: float, rate: float) -> dict[str, float]:
    """Run ``variant`` for ``seconds``: the medians of its triggers' parts (ms)."""
    with tempfile.TemporaryDirectory(prefix="sqe-floor-") as ck:
        spark.conf.unset(FILE_MANAGER_SETTING)
        if variant.endswith("filecontext"):
            spark.conf.set(FILE_MANAGER_SETTING, _FILE_CONTEXT)
        else:
            use_file_system_manager(spark, ck)
        rows = spark.readStream.format("floor-rows").option("rate", str(rate)).load()
        if variant == "foreachbatch-planned":
            rows = rows.mapInArrow(_count, "n long")
        w = rows.writeStream.option("checkpointLocation", ck)
        if variant == "foreachbatch":
            q = w.foreachBatch(lambda df, _: df.mapInArrow(_count, "n long").collect()).start()
        elif variant == "foreachbatch-planned":
            q = w.foreachBatch(lambda df, _: df.collect()).start()
        else:
            q = w.format("floor-count").start()
        time.sleep(seconds)
        if q.exception() is not None:
            raise SystemExit(f"{variant}: the query failed: {q.exception()}")
        progress = q.recentProgress
        q.stop()
    kept = [p for p in progress if p["numInputRows"] > 0][5:]
    if not kept:
        raise SystemExit(f"{variant}: no trigger read rows in {seconds} s")
    parts = sorted(set().union(*[p["durationMs"] for p in kept]))
    return {k: float(statistics.median(p["durationMs"].get(k, 0) for p in kept))
            for k in parts} | {"triggers": float(len(kept)),
                               "rows": float(statistics.median(p["numInputRows"] for p in kept))}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each variant runs")
    ap.add_argument("--rate", type=float, default=1000.0, help="rows the source makes a second")
    ap.add_argument("--variant", action="append", choices=VARIANTS,
                    help="a variant to run (default: all)")
    ap.add_argument("--config", help="a config file whose Spark: map the session takes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    conf = dict(load_config(args.config).spark) if args.config else None
    spark = build_session("sqe-floor", conf, master="local[2]")
    spark.dataSource.register(InventedRows)
    spark.dataSource.register(CountingSink)
    result = {v: one(spark, v, args.seconds, args.rate) for v in args.variant or VARIANTS}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    keys = ("rows", "latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets",
            "triggerExecution")
    print(f"{'variant':20} " + " ".join(f"{k:>16}" for k in keys) + "   (ms, medians)")
    for v, m in result.items():
        print(f"{v:20} " + " ".join(f"{m.get(k, 0):16.0f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
