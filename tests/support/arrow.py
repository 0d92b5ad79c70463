"""PySpark's own Arrow type of a Spark type, on each release (4.0's ``to_arrow_type`` takes no
``timezone``), for the tests that hold :func:`sqe.wire.arrow_types.arrow_type` equal to it."""

from __future__ import annotations

from typing import Any

__all__ = ["pyspark_arrow_type"]


def pyspark_arrow_type(t: Any) -> Any:
    """``pyspark.sql.pandas.types.to_arrow_type(t)``, timestamps in UTC."""
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(t, timezone="UTC")
    except TypeError:  # pyspark 4.0
        return to_arrow_type(t)
