"""Waiting out a Redis that answers ``BUSY`` while some client's Lua script or function runs.

Redis runs one script at a time and nothing beside it.  Once a script has run longer than the
server's ``busy-reply-threshold`` (``lua-time-limit``, 5 s by default) every other command is
refused with ``BUSY Redis is busy running a script`` until the script ends.  A long script is
not exotic here: the HWM store's commit moves a batch's staged Redis-state rows inside one
script, so a batch of a million rows holds its Redis for several seconds, and every other
topology sharing that Redis (a chain's other step reading its marks, say) would fail its batch
on ``BUSY``.

A refused command was not run, so sending it again is always safe.  :class:`BusyRetry` is the
redis-py :class:`~redis.retry.Retry` every client SQE makes uses: it sends a command or
pipeline that got ``BUSY`` again, backing off from 50 ms to 1 s, for up to
:data:`BUSY_WAIT_S` seconds, on the same connection (a ``BUSY`` reply leaves it sound).
Past that it raises :class:`RedisBusyError`, one sentence saying how long Redis was busy and
what to do.  Other errors are not retried, as before: a dead server fails the batch at once.

    >>> is_busy(redis.ResponseError("BUSY Redis is busy running a script. You can only ..."))
    True
    >>> is_busy(redis.ResponseError("BUSYKEY Target key name already exists."))
    False
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from sqe.errors import RedisBusyError

__all__ = ["BUSY_WAIT_S", "BusyRetry", "RedisBusyError", "is_busy"]

BUSY_WAIT_S = 120.0
"""How long a command refused with ``BUSY`` is sent again before the client gives up."""

_FIRST_PAUSE_S = 0.05
_LONGEST_PAUSE_S = 1.0
_WARN_AFTER_S = 1.0
# Redis's own reply, bare or as redis-py's pipeline error ("Command # 2 (...) of pipeline
# caused error: BUSY ..."); BUSYKEY and BUSYGROUP are other errors.
_BUSY = re.compile(r"(?:^|caused error: )BUSY ")
_LOG = logging.getLogger("sqe.redis")
T = TypeVar("T")


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a command because a script or function is running."""
    return isinstance(exc, redis.ResponseError) and bool(_BUSY.search(str(exc)))


class BusyRetry(Retry):
    """``inner``'s retries, plus waiting out ``BUSY`` for up to ``wait_s`` seconds.

    Args:
        inner: the policy for every other error; ``None``: no retry, what a connection of a
            client made by ``Redis.from_url`` or a Sentinel gets (a dead or hung server
            fails the command at once, and the batch is retried as a whole).
        wait_s: how long a command refused with ``BUSY`` is sent again.
    """

    def __init__(self, inner: Retry | None = None, wait_s: float = BUSY_WAIT_S) -> None:
        super().__init__(NoBackoff(), 0)
        self.inner = inner if inner is not None else Retry(NoBackoff(), 0)
        self.wait_s = wait_s

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, BusyRetry) and self.inner == other.inner \
            and self.wait_s == other.wait_s

    def __hash__(self) -> int:
        return hash((self.inner, self.wait_s))

    def get_retries(self) -> int:
        """The inner policy's retries (redis-py reads them to decide when to reconnect)."""
        return self.inner.get_retries()

    def update_retries(self, value: int) -> None:
        """Set the inner policy's retries."""
        self.inner.update_retries(value)

    def update_supported_errors(self, specified_errors: Any) -> None:
        """Add errors the inner policy retries (a client's ``retry_on_error``)."""
        self.inner.update_supported_errors(specified_errors)

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        """``do()``, sent again while Redis answers ``BUSY`` and as redis-py retries otherwise."""
        started: float | None = None
        pause = _FIRST_PAUSE_S
        warned = False
        while True:
            try:
                return self.inner.call_with_retry(do, fail, is_retryable, with_failure_count)
            except redis.ResponseError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                started = now if started is None else started
                if now - started >= self.wait_s:
                    raise RedisBusyError(
                        f"it answered BUSY for {round(now - started, 1):g} s: a Lua script or function "
                        "has been running that long and Redis runs nothing beside it (SCRIPT "
                        "KILL or FUNCTION KILL ends it; a batch whose commit moves millions of "
                        "rows holds it that long, so lower jw.sqe.spout.kafka.maxRecordsPerBatch "
                        "of the topology that writes there)") from None
                if not warned and now - started >= _WARN_AFTER_S:
                    _LOG.warning("Redis is busy running a script; waiting for it, up to %.0f s",
                                 self.wait_s)
                    warned = True
                time.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)
