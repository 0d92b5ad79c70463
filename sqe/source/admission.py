"""How a Python source caps its micro-batches on each PySpark release.

PySpark 4.2 gave Python streaming sources admission control: Spark passes ``latestOffset`` the
batch's start and a read limit (``maxRecordsPerBatch`` as Spark's row limit), and calls
``prepareForTriggerAvailableNow`` so an AvailableNow run reads its backlog in capped batches.
PySpark 4.0 and 4.1 call ``latestOffset()`` with nothing and have neither, so SQE's sources cap
their batches themselves (:class:`Position`): the start of the next batch is the end of the
last one Spark planned (``partitions(start, end)``, which Spark also calls with the checkpoint's
last offsets when a query restarts) or, before any, where the query starts.  What they cannot
cap is the first answer of a run: an AvailableNow run's end is fixed by the one
``latestOffset()`` call Spark makes for it before its first batch, exactly as a run with a
processing-time trigger asks for its first batch, and a capped answer would end such a run
after one batch.  So the first batch of a run reads what is there, and an AvailableNow run
reads its backlog in that one batch; every later batch is capped.  A query known not to run
AvailableNow caps its first batch too (the source option ``capFirstBatch``, which ``sqe run``
sets unless ``--once``).  :func:`limits_note` is the sentence a run says at start.

The names a source needs (``ReadLimit``, ``ReadMaxRows``, ``ReadAllAvailable``,
``SupportsTriggerAvailableNow``) are PySpark's where it has them and stand-ins of the same
shape where it does not; :data:`ADMISSION_CONTROL` says which.

    >>> p = Position()
    >>> p.ask()
    (None, True)
    >>> p.seen({"0": 10})
    >>> p.ask()
    ({'0': 10}, False)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyspark

__all__ = ["ADMISSION_CONTROL", "Position", "ReadAllAvailable", "ReadLimit", "ReadMaxRows",
           "SupportsTriggerAvailableNow", "limits_note"]

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL: bool
else:
    try:
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )

        ADMISSION_CONTROL = True
    except ImportError:  # pyspark 4.0 and 4.1
        ADMISSION_CONTROL = False

        class ReadLimit:
            """A read limit (PySpark 4.2's, which this release lacks)."""

        @dataclass
        class ReadAllAvailable(ReadLimit):
            """No limit."""

        @dataclass
        class ReadMaxRows(ReadLimit):
            """At most ``max_rows`` rows a batch."""

            max_rows: int

        class SupportsTriggerAvailableNow(ABC):
            """A source that fixes an AvailableNow run's end (never called here)."""

            @abstractmethod
            def prepareForTriggerAvailableNow(self) -> None:
                """Fix the end of the run."""


class Position:
    """Where the next micro-batch starts, as far as the driver's reader has seen (for PySpark
    without admission control, whose ``latestOffset()`` is given no start)."""

    def __init__(self) -> None:
        self.start: dict | None = None
        self.asked = False

    def seen(self, end: dict) -> None:
        """Spark planned (or restarted at) a batch ending at ``end``."""
        self.start = dict(end)

    def ask(self) -> tuple[dict | None, bool]:
        """Where the next batch starts (None: where the query starts), and whether this is the
        run's first ask (whose answer is not capped: see the module docstring)."""
        first, self.asked = not self.asked, True
        return self.start, first


def limits_note(capped: bool) -> str | None:
    """The sentence a run on PySpark without admission control says at start (None on 4.2
    and later); ``capped``: whether a stream sets ``maxRecordsPerBatch``."""
    if ADMISSION_CONTROL:
        return None
    cap = ("its sources cap each batch at jw.sqe.spout.kafka.maxRecordsPerBatch themselves, "
           "and " if capped else "")
    return (f"pyspark {pyspark.__version__} has no admission control for Python sources (it "
            f"came in 4.2): {cap}an AvailableNow run (sqe run --once) reads its whole backlog "
            "in one batch")
