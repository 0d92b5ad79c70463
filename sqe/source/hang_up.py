"""A quiet end for the Python process that plans a Spark stream when Spark hangs up on it.

Spark runs a streaming Python data source's planning side (``latestOffset``,
``partitions``, ``commit``) in a process of its own,
``pyspark.sql.streaming.python_streaming_source_runner``.  When a query stops while
that process is answering (``query.stop()`` interrupts the stream thread, which
closes its channel before Spark terminates the process), the runner reads end of
file, fails to write the error back on the closed socket and prints both
tracebacks on the terminal of the user who pressed Ctrl-C, although nothing went
wrong: the query stopped as asked.

:func:`quiet_hang_up` (called where SQE's stream reader is made) makes only that
process, and only for that chain of errors, end without the traceback; every other
error is printed as before.
"""

from __future__ import annotations

import sys
from types import TracebackType

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

# What reading from and writing to a socket the other end closed raises.
_HANG_UP = (EOFError, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def hung_up(error: BaseException) -> bool:
    """Whether ``error`` and every error it was raised while handling are Spark's socket
    closing under the runner (end of file, a broken pipe, a reset)."""
    seen: BaseException | None = error
    while seen is not None:
        if not isinstance(seen, _HANG_UP):
            return False
        seen = seen.__cause__ or seen.__context__
    return True


def _hook(previous: object) -> object:
    def hook(kind: type[BaseException], error: BaseException,
             trace: TracebackType | None) -> None:
        if not hung_up(error):
            previous(kind, error, trace)  # type: ignore[operator]
    hook.quiet_hang_up = True  # type: ignore[attr-defined]
    return hook


def quiet_hang_up(main_module: str | None = None) -> bool:
    """In Spark's streaming source runner process (``main_module``, by default the running
    program's, names it), let a hang-up end the process without a traceback; whether the
    hook is in place.  Anywhere else (the driver, an executor's task) nothing changes."""
    if main_module is None:
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        main_module = getattr(spec, "name", None)
    if main_module != RUNNER:
        return False
    if not getattr(sys.excepthook, "quiet_hang_up", False):
        sys.excepthook = _hook(sys.excepthook)  # type: ignore[assignment]
    return True
