"""A call to a store sent again on a new connection while the store is briefly away.

A connection that drops or times out -- a reset, a reply lost after the server did the work,
a failover, a blackhole of a few seconds -- is not the end of a run: every call SQE makes
to its HWM store is idempotent (reads; a commit by batch id; applying staged rows from where
the last application stopped), so :func:`retried` sends it again, after pauses that double
from 0.1 s to 2 s, for up to ``seconds`` (``jw.sqe.spout.kafka.filterReplays.redis.
commitRetrySeconds``), warning each time.  Any other Redis error, or a store away longer,
is raised to the caller, which says it in one sentence.  :func:`asked` is the form every
call to the HWM store takes: :func:`retried` with the store's retry time and way of describing
an error, any failure becoming one :class:`Failed` whose text is the store's own words;
:func:`answered` is its result, a failure said as one :class:`~sqe.errors.SourceError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import redis

from sqe.errors import SourceError

__all__ = ["REDIS_BLIPS", "Failed", "Store", "Unreachable", "answered", "asked", "retried",
           "times_tried"]

log = logging.getLogger("sqe")
T = TypeVar("T")

_FIRST_PAUSE_S = 0.1
_LONGEST_PAUSE_S = 2.0


#: The option that bounds how long a call to the HWM store is sent again.
_HWM_RETRY = "jw.sqe.spout.kafka.filterReplays.redis.commitRetrySeconds"

#: What a Redis call raises when its connection drops or times out.
REDIS_BLIPS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)


def times_tried(tries: int, option: str = _HWM_RETRY) -> str:
    """What a failure's sentence adds when its call was sent more than once: `` (tried N times
    within <option>)``, or nothing."""
    return f" (tried {tries} times within {option})" if tries > 1 else ""


class Unreachable(Exception):
    """The store stayed away: ``error`` is the last connection error after ``tries`` tries."""

    def __init__(self, error: Exception, tries: int) -> None:
        super().__init__(str(error))
        self.error, self.tries = error, tries


def retried(call: Callable[[], T], seconds: float, who: str, action: str,
            describe: Callable[[BaseException], str], errors: tuple[type[Exception], ...]
            = REDIS_BLIPS, store: str = "the HWM store", failed: Exception | None = None
            ) -> tuple[T, int]:
    """``call()`` and the connection failures (``errors``) it took; each failure within
    ``seconds`` is warned about (``who``: ``store``'s connection failed at ``action``,
    ``describe(error)``) and the call sent again.  ``failed``: the first try was made
    already and failed so.  Raises :class:`Unreachable` when the store is still away after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    pause, tries = _FIRST_PAUSE_S, 0
    while True:
        if failed is None:
            try:
                return call(), tries
            except errors as exc:
                failed = exc
        tries += 1
        if time.monotonic() + pause > deadline:
            raise Unreachable(failed, tries) from None
        log.warning("%s: %s's connection failed at %s (%s); sending %s again on a new "
                    "connection", who, store, action, describe(failed), action)
        failed = None
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE_S)


class Store(Protocol):
    """What :func:`asked` needs of a store: how long to send a call again, and how to say an
    error of it (never its password)."""

    commit_retry_s: float

    def describe_error(self, exc: BaseException) -> str: ...


class Failed(Exception):
    """A call to a store that failed: the store refused it, or stayed away for longer than the
    retry time.  ``str()`` is the store's error in its own words; ``error`` the error itself;
    ``tries`` how many times the call was sent."""

    def __init__(self, text: str, error: Exception, tries: int) -> None:
        super().__init__(text)
        self.error, self.tries = error, tries


def asked(store: Store, call: Callable[[], T], who: str, action: str,
          seconds: float | None = None) -> tuple[T, int]:
    """:func:`retried` of ``call`` to ``store`` for ``seconds`` (its ``commit_retry_s`` when
    None): the result and the connection failures it took, or :class:`Failed`."""
    try:
        return retried(call, store.commit_retry_s if seconds is None else seconds, who,
                       action, store.describe_error)
    except Unreachable as away:
        raise Failed(store.describe_error(away.error), away.error, away.tries) from None
    except redis.RedisError as exc:
        raise Failed(store.describe_error(exc), exc, 1) from None


def answered(store: Store, call: Callable[[], T], who: str, action: str, failing: str,
             seconds: float | None = None) -> T:
    """The result of :func:`asked`; a failure as one :class:`~sqe.errors.SourceError`:
    ``failing`` (what could not be done, and whose), the store's words and how often the
    call was sent."""
    try:
        return asked(store, call, who, action, seconds)[0]
    except Failed as exc:
        raise SourceError(f"{failing}: {exc}{times_tried(exc.tries)}") from None
