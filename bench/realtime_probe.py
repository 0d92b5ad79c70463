"""Whether Spark's real-time mode (``trigger(realTime=...)``) takes the pieces SQE is built from.

    PYTHONPATH=. PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/realtime_probe.py [--seconds 30]

Real-time mode runs long batches whose records flow through as they arrive (milliseconds end to
end), where a micro-batch stream pays each batch's fixed cost before a record is out.  SQE reads
Kafka with a Python data source (``sqe-kafka``) and writes each batch with ``foreachBatch`` (the
batch id is what makes Spark's re-runs harmless).  This starts, in a local session, a stream
for each pair of a source (Spark's ``rate`` source, a Python data source like SQE's) and a sink
(``foreachBatch``, ``foreach``) with the real-time trigger, and prints per pair whether it ran
or the error class Spark refused it with.  Exit 0 either way; 1 when no session starts.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from bench.harness.report import parser


class Counting(DataSource):
    """A Python streaming source of one long column, a record a read (as ``sqe-kafka`` is one)."""

    @classmethod
    def name(cls) -> str:
        return "counting"

    def schema(self) -> str:
        return "v long"

    def simpleStreamReader(self, schema: Any) -> SimpleDataSourceStreamReader:
        return _Reader()


class _Reader(SimpleDataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"o": 0}

    def read(self, start: dict) -> tuple:
        return iter([(start["o"],)]), {"o": start["o"] + 1}

    def readBetweenOffsets(self, start: dict, end: dict) -> Any:
        return iter([(start["o"],)])


def probe(spark: SparkSession, source: str, sink: str, seconds: float) -> str:
    """Whether a real-time stream from ``source`` to ``sink`` ran (a batch with rows) or Spark's
    error class refusing it, within ``seconds``."""
    frame = spark.readStream.format(source).load()
    # pyspark 4.3 types trigger() by overloads that do not list realTime yet
    writer = frame.writeStream.outputMode("update").trigger(  # type: ignore[call-overload]
        realTime="5 seconds")
    writer = (writer.foreachBatch(lambda df, i: None) if sink == "foreachBatch"
              else writer.foreach(lambda row: None))
    try:
        query = writer.start()
    except Exception as exc:
        return _refusal(exc)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            failure = query.exception()
            if failure is not None:
                return _refusal(failure)
            progress = query.lastProgress
            if progress and progress["numInputRows"]:
                return f"ran: {progress['numInputRows']} rows in a batch"
            time.sleep(0.2)
        return f"started, but neither a row nor an error within {seconds:g} s"
    finally:
        query.stop()


def _refusal(failure: BaseException) -> str:
    found = re.search(r"\[([A-Z_.]+)\]", str(failure))
    return f"refused: {found.group(1) if found else str(failure).splitlines()[0]}"


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each stream runs")
    args = ap.parse_args()
    try:
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    except Exception as exc:
        print(f"realtime_probe: no Spark session: {exc}", file=sys.stderr)
        return 1
    spark.sparkContext.setLogLevel("OFF")
    spark.dataSource.register(Counting)
    print(f"Spark {spark.version}, trigger(realTime='5 seconds'):")
    for source in ("rate", "counting"):
        for sink in ("foreachBatch", "foreach"):
            kind = "Python data source" if source == "counting" else "rate source"
            print(f"  {kind:18s} -> {sink:12s} {probe(spark, source, sink, args.seconds)}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
