"""A Python stream writer that is given Arrow record batches on each PySpark release.

PySpark 4.1 gave Python stream writers ``DataSourceStreamArrowWriter``: ``write`` is given
the task's rows as ``pyarrow.RecordBatch``\\ es.  PySpark 4.0 has only
``DataSourceStreamWriter``, whose ``write`` is given ``Row`` objects; there
:class:`ArrowStreamWriter` turns them into record batches of the writer's schema itself
(:data:`BATCH_ROWS` rows at a time; a Python loop over the rows, which 4.1 and later do not
need).  A writer subclasses :class:`ArrowStreamWriter`, sets :attr:`~ArrowStreamWriter.schema`
and writes batches in :meth:`~ArrowStreamWriter.write_batches`.

    >>> ARROW_WRITER in (True, False)
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import StructType

from sqe.wire.arrow_types import arrow_type

__all__ = ["ARROW_WRITER", "BATCH_ROWS", "ArrowStreamWriter", "row_batches"]

#: Rows turned into one record batch at a time where PySpark gives rows.
BATCH_ROWS = 10_000

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _Base

    ARROW_WRITER: bool
else:
    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter as _Base

        ARROW_WRITER = True
    except ImportError:  # pyspark 4.0
        from pyspark.sql.datasource import DataSourceStreamWriter as _Base

        ARROW_WRITER = False


def row_batches(rows: Iterator[Any], schema: StructType) -> Iterator[pa.RecordBatch]:
    """``rows`` (PySpark ``Row`` objects) as record batches of ``schema``."""
    arrow = pa.schema([pa.field(f.name, arrow_type(f.dataType), f.nullable)
                       for f in schema.fields])
    while chunk := list(islice(rows, BATCH_ROWS)):
        yield pa.RecordBatch.from_pylist([r.asDict(recursive=True) for r in chunk],
                                         schema=arrow)


class ArrowStreamWriter(_Base):
    """A stream writer given record batches (see the module docstring): a subclass sets
    :attr:`schema` (``streamWriter``'s) and writes in :meth:`write_batches`."""

    schema: StructType

    def write(self, iterator: Iterator[Any]) -> Any:
        """What Spark calls: the task's rows, as record batches, to :meth:`write_batches`."""
        return self.write_batches(iterator if ARROW_WRITER else row_batches(iterator, self.schema))

    def write_batches(self, batches: Iterator[pa.RecordBatch]) -> Any:
        """Write one task's record batches; returns its commit message."""
        raise NotImplementedError
