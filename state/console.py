"""The console state: a query's rows printed on the driver's standard output, for debugging.

Each row is one line, ``<objectName>: field=value, ...``.  Nothing is kept, so a
batch Spark re-runs prints its rows again.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from sqe.wire.columns import field_column
from state.sink import Sink

__all__ = ["ConsoleSink"]


class ConsoleSink(Sink):
    """``stateName: CONSOLE``."""

    state_name = "CONSOLE"

    def write_empty(self, frame: DataFrame) -> int:
        return 0  # nothing to print

    def write(self, frame: DataFrame) -> int:
        rows = frame.select(*[field_column(f) for f in self.target.fields]).collect()
        for row in rows:
            values = ", ".join(f"{k}={v!r}" for k, v in row.asDict().items())
            print(f"{self.target.name}: {values}", flush=True)
        return len(rows)
