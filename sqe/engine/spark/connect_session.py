"""A Spark Connect client's session: the run's Spark lives in a server, this process has no JVM.

``sqe run --remote sc://host:port`` (or ``SPARK_REMOTE``, or ``spark.remote`` in a config
file's ``Spark:`` section) makes the session with :func:`connect_session`.  The client needs
``pyspark[connect]``'s gRPC libraries (``pip install 'sqe-spark[connect]'``) and no Java.
The server must be reachable, which is checked first: gRPC would otherwise retry for
minutes before it says anything.  The config file's Spark settings are set on the
session; one the server does not let a client change (a static setting such as
``spark.executor.memory``: set it where the server starts) is a warning, not a failure.
"""

from __future__ import annotations

import logging
import re
import socket
import warnings
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from sqe.config.extras import require
from sqe.errors import PrerequisiteError
from sqe.secrets import redact_url
from sqe.version import __version__

__all__ = ["DEFAULT_PORT", "abandon", "check_server_python", "connect_session", "server_lost",
           "server_address"]

log = logging.getLogger("sqe")

#: The port of a Spark Connect server whose URL names none.
DEFAULT_PORT = 15002

#: Retries of a call to a server that does not answer: 50 ms, x4 each time, at most 10 s
#: apart, about a minute in all.
RETRIES = 10

#: How a server that came back says it has lost a client's session; and what pyspark's client
#: says instead once it has closed itself on SESSION_CHANGED (every call after, the first too).
_CLOSED = "NO_ACTIVE_SESSION"
_SESSION_GONE = re.compile(rf"INVALID_HANDLE\.SESSION_(?:NOT_FOUND|CHANGED)|(?<=\[){_CLOSED}(?=\])")

#: Settings that choose the session, not configure it.
_CHOOSERS = ("spark.remote", "spark.master", "spark.api.mode")


def server_address(remote: str) -> tuple[str, int]:
    """The host and port of a Spark Connect URL (``sc://host[:port][/;params]``)."""
    parts = urlsplit(remote)
    if parts.scheme != "sc" or not parts.hostname:
        raise PrerequisiteError(f"{redact_url(remote)}: a Spark Connect server is named "
                                "sc://host:port "
                                "(as pyspark --remote and SPARK_REMOTE take it)")
    return parts.hostname, parts.port or DEFAULT_PORT


def _reachable(remote: str, timeout: float = 10.0) -> None:
    host, port = server_address(remote)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise PrerequisiteError(f"cannot reach the Spark Connect server at {redact_url(remote)} "
                                f"({exc.strerror or exc}); is it running there?") from None


def _sqe_version(batches: Iterator[Any]) -> Iterator[Any]:
    """A Python worker's answer to :func:`check_server_python`: the sqe it imports."""
    import pyarrow as pa

    for _ in batches:
        pass
    # this function travels by reference: a worker that runs it has imported its own sqe
    yield pa.RecordBatch.from_arrays([pa.array([__version__])], names=["sqe"])


def check_server_python(spark: Any, remote: str) -> None:
    """Hold the server's Python workers (which run SQE's source, states and batches) to having
    sqe, the version of this client: one sentence when they do not."""
    try:
        found = str(spark.range(1).mapInArrow(_sqe_version, "sqe string").first()[0])
    except Exception as exc:  # the worker could not unpickle the probe, which is sqe's
        missing = re.search(r"No module named '(sqe[\w.]*)'", str(exc))
        if not missing:
            raise
        raise PrerequisiteError(
            f"the Spark Connect server at {redact_url(remote)} runs Python workers that cannot "
            "import sqe "
            f"(No module named '{missing.group(1)}'): install sqe-spark {__version__} where the "
            "server's and its executors' Python are (a cluster library, or the server started "
            "with PYSPARK_PYTHON pointing at an environment that has it; docs/connect.md)"
        ) from None
    if found != __version__:
        log.warning(f"warning: the Spark Connect server at {redact_url(remote)} has sqe {found} "
                    "and this "
                    f"client sqe {__version__}: the batches run the server's")


def server_lost(exc: BaseException) -> str | None:
    """The sentence for a Spark Connect server that stopped answering, or that answers again
    without the session (restarted), when ``exc`` says so, else None.  gRPC's UNAVAILABLE
    comes once the retries are spent; ``INVALID_HANDLE.SESSION_NOT_FOUND`` (which pyspark
    may wrap in ``RESPONSE_ALREADY_RECEIVED``) or ``SESSION_CHANGED`` when a server came
    back within them, its queries gone with the old one; pyspark's ``[NO_ACTIVE_SESSION]``
    from a client that closed itself on SESSION_CHANGED."""
    text = str(exc)
    gone = _SESSION_GONE.search(text)
    if gone is not None:
        if gone.group(0) == _CLOSED:
            what = (f"the Spark Connect client closed this run's session ({_CLOSED}: its server "
                    "was restarted under it, or the session was stopped)")
        else:
            what = (f"the Spark Connect server no longer holds this run's session "
                    f"({gone.group(0)}: it was restarted, or it closed the session)")
        return (f"{what}, so the run ended with it; what its batches committed "
                "stays committed, and the next run continues from the checkpoint")
    if "StatusCode.UNAVAILABLE" not in text:
        return None
    details = re.search(r'details = "([^"]*)"', text)
    why = details.group(1) if details else "unavailable"
    return (f"the Spark Connect server stopped answering for about a minute ({why}), so the "
            "run ended with it; what its batches committed stays committed, and the next run "
            "continues from the checkpoint")


def abandon(spark: Any) -> None:
    """Close the session's channel to a server that is gone, without a word to it: pyspark's
    exit handler would otherwise send its clean-up calls there, each retried for about a
    minute, and the process would hang that long after the run said the server was lost."""
    spark.client.close()


def connect_session(remote: str, app_name: str, conf: Mapping[str, str],
                    origins: Mapping[str, str]) -> Any:
    """A Spark Connect session with server ``remote``, and ``conf`` set on it where the server
    allows (``origins``: where each setting came from, for the warnings)."""
    require("grpc", f"a Spark Connect session ({redact_url(remote)})")
    from pyspark.sql.connect.client.retries import DefaultPolicy  # needs grpc, checked above

    _reachable(remote)
    session = SparkSession.builder.remote(remote).getOrCreate()
    # a server that stops answering is a failure within a minute (by default gRPC calls are
    # retried for ten), so a run never hangs on a dead server
    session.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, max_backoff=10_000)])
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")  # said as a sentence
    for key, value in conf.items():
        if key in _CHOOSERS:
            continue
        try:
            session.conf.set(key, value)
        except Exception as exc:  # the server's refusal, as one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning(f"warning: {origins.get(key, 'Spark conf')}: {key} is not set on the "
                        f"Spark Connect session ({first}); set it where the server starts")
    check_server_python(session, remote)
    log.info(f"Spark Connect session with {redact_url(remote)} ({app_name})")
    return session
