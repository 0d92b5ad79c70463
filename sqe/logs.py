"""How much the libraries under SQE say: one level for librdkafka's and Spark's logs.

SQE says what went wrong in one sentence of its own; the libraries' logs are for
looking deeper, so they are quiet by default.  The level (``sqe run --log-level``)
travels in the environment variable :data:`LOG_LEVEL_ENV`, so the executors' Kafka
clients follow it too:

* ``quiet`` (the default): no librdkafka lines, Spark's fatal errors only (a failed
  task's ERROR lines and stack traces say less than SQE's sentence about it, e.g.
  the bad record it names);
* ``error``, ``warning``, ``info``, ``debug``: both at that level.

librdkafka's lines go through the Python logger ``sqe.kafka``
(:func:`kafka_logger`), where lines that repeat -- a broker that does not answer
is retried many times a second -- are collapsed (:class:`Collapse`).

    >>> spark_log_level("quiet"), spark_log_level("warning")
    ('FATAL', 'WARN')
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time

from sqe.errors import ArgumentError

__all__ = ["LEVELS", "LOG_LEVEL_ENV", "Collapse", "kafka_logger", "log_level", "set_log_level",
           "spark_log_level"]

#: The environment variable that carries the level to every process of a run.
LOG_LEVEL_ENV = "SQE_LOG_LEVEL"

#: Level -> (Python logging level of librdkafka's lines, Spark's log4j level).
LEVELS: dict[str, tuple[int, str]] = {
    "quiet": (logging.CRITICAL + 10, "FATAL"),
    "error": (logging.ERROR, "ERROR"),
    "warning": (logging.WARNING, "WARN"),
    "info": (logging.INFO, "INFO"),
    "debug": (logging.DEBUG, "DEBUG"),
}


def log_level() -> str:
    """The level of this process (the environment's, else ``quiet``)."""
    level = os.environ.get(LOG_LEVEL_ENV, "quiet").strip().lower()
    return level if level in LEVELS else "quiet"


def set_log_level(level: str) -> None:
    """Use ``level`` in this process and the processes it starts."""
    if level not in LEVELS:
        raise ArgumentError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    os.environ[LOG_LEVEL_ENV] = level
    kafka_logger()


def spark_log_level(level: str | None = None) -> str:
    """Spark's log4j level for ``level`` (default: this process's)."""
    return LEVELS[level or log_level()][1]


class Collapse(logging.Filter):
    """Lets a line through once per ``seconds`` for lines that differ only in numbers; the next
    one let through says how many like it were held back."""

    def __init__(self, seconds: float = 30.0) -> None:
        super().__init__()
        self.seconds = seconds
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        last, held = self._seen.get(key, (float("-inf"), 0))
        if now - last < self.seconds:
            self._seen[key] = (last, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it held back)"
            record.args = ()
        return True


def kafka_logger() -> logging.Logger:
    """The logger librdkafka's lines go to, at this process's level, repeats collapsed."""
    logger = logging.getLogger("sqe.kafka")
    logger.setLevel(LEVELS[log_level()][0])
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kafka: %(message)s"))
        handler.addFilter(Collapse())
        logger.addHandler(handler)
        logger.propagate = False
    return logger
