"""Queries whose Python process did not connect back to Spark in time, started again in the run.

Spark starts some Python processes of a query itself and waits a fixed 10 s for each to
connect back (``PythonWorkerFactory.createSimpleWorker``, not a setting): the planner of a
Python data source's stream (SQE's ``sqe-kafka`` source), which starts with the query's
first batch, and over Spark Connect the process that runs the query's ``foreachBatch``.
On a busy machine a Python start (pyspark, pyarrow, SQE's clients) can take longer, and
the query fails with ``Python worker failed to connect back`` before its batch wrote
anything.  Since each batch commits with its id and a query starts again from its
checkpoint, starting it again at once is safe: :func:`start_query` does so for a start
that fails that way (over Connect, where ``start()`` waits for the process), and
:class:`QueryStarts` for a query that failed that way after it started, each time with
a warning.  A query that fails that way :data:`STARTS` times in a row without a batch
between ends the run with a sentence saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqe.errors import RunError

__all__ = ["STARTS", "QueryStarts", "not_back", "start_query"]

log = logging.getLogger("sqe")

#: Starts in a row of a query whose Python process did not connect back, before the run ends.
STARTS = 3

#: What Spark says when a Python process it started did not connect back within its 10 s.
_NOT_BACK = "Python worker failed to connect back"


def not_back(failure: BaseException | str) -> bool:
    """Whether ``failure`` is Spark's "Python worker failed to connect back"."""
    return _NOT_BACK in str(failure)


def start_query(writer: Any, name: str) -> Any:
    """``writer.start()``, tried again (up to :data:`STARTS` times in all, each said) when the
    server's Python process for the query's ``foreachBatch`` did not connect back in time
    (over Spark Connect, ``start()`` waits for it): nothing ran yet, so starting again is
    safe."""
    for attempt in range(2, STARTS + 1):
        try:
            return writer.start()
        except Exception as exc:
            if not not_back(exc):
                raise
            log.warning(f"warning: {name}: the server's Python process for foreachBatch did not "
                        f"connect back within Spark's 10 s (a busy server); starting the query "
                        f"again ({attempt} of {STARTS})")
    return writer.start()


class QueryStarts:
    """The run's queries (``queries``, kept up to date in place) and how to start each again:
    :meth:`check` starts again a query that failed because a Python process did not connect
    back in time, and raises any other failure."""

    def __init__(self, queries: list[Any]) -> None:
        self.queries = queries
        self._starters: list[Callable[[], Any]] = []
        self._names: list[str] = []
        self._in_a_row: list[int] = []

    def start(self, name: str, starter: Callable[[], Any]) -> None:
        """Start query ``name`` with ``starter`` (which also starts it again)."""
        self.queries.append(starter())
        self._starters.append(starter)
        self._names.append(name)
        self._in_a_row.append(1)

    def restart(self, index: int, starter: Callable[[], Any]) -> None:
        """Start query ``index`` (stopped by the caller) anew with ``starter``."""
        self.queries[index] = starter()
        self._starters[index] = starter
        self._in_a_row[index] = 1

    def check(self, ending: bool = False) -> bool:
        """Raise the failure of a query that cannot be started again; start again those that
        can (True when one was).  ``ending``: the run ends now (its time is over), so such a
        query is not started again, only said."""
        again = False
        for i, query in enumerate(self.queries):
            failure = query.exception()
            if failure is None:
                continue
            if query.recentProgress:  # it ran batches since its start: a new run of starts
                self._in_a_row[i] = 1
            if not not_back(failure):
                raise failure
            if self._in_a_row[i] >= STARTS:
                raise RunError(
                    f"{self._names[i]}: a Python process Spark started for the query did not "
                    f"connect back within Spark's fixed 10 s, {STARTS} times in a row: the "
                    "machine is too busy to start Python in time (fewer processes on it, or "
                    "more cores); what its batches committed stays committed, and the next run "
                    "continues from the checkpoint") from None
            late = (f"warning: {self._names[i]}: a Python process Spark started for the query "
                    "did not connect back within Spark's 10 s (a busy machine)")
            if ending:
                log.warning(f"{late} as the run's time ended; the next run continues from its "
                            "checkpoint")
                continue
            self._in_a_row[i] += 1
            log.warning(f"{late}; starting the query again from its checkpoint "
                        f"({self._in_a_row[i]} of {STARTS})")
            self.queries[i] = self._starters[i]()
            again = True
        return again
