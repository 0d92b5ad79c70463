"""The reader consumers an executor process keeps between the ``sqe-kafka`` source's tasks."""

from __future__ import annotations

import json
from typing import Any

from sqe.source.kafka.config import SourceConfig

__all__ = ["READERS", "ReaderPool"]


class ReaderPool:
    """The reader consumers this executor process keeps between tasks, by their settings.

    Spark reuses its Python workers across tasks and batches; a consumer made per task paid a
    connection and a metadata round trip to the brokers every time (about 30 ms, four times
    per micro-batch of a 4-partition topic).  A task takes an idle consumer (or makes one),
    assigns its range, and gives it back unassigned once the range is read; a task that fails
    or is stopped closes its consumer instead.
    """

    def __init__(self) -> None:
        self._idle: dict[str, list[Any]] = {}

    @staticmethod
    def _key(cfg: SourceConfig) -> str:
        return json.dumps(cfg.consumer_settings("reader"), sort_keys=True, default=str)

    def take(self, cfg: SourceConfig) -> Any:
        idle = self._idle.get(self._key(cfg))
        return idle.pop() if idle else cfg.consumer("reader")

    def give_back(self, cfg: SourceConfig, consumer: Any) -> None:
        consumer.unassign()  # librdkafka drops what it fetched for the range
        self._idle.setdefault(self._key(cfg), []).append(consumer)


#: This process's pool.
READERS = ReaderPool()
