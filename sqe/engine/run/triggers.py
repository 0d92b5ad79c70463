"""When a stream's micro-batches run, and what Spark spends on each outside SQE's batch.

A stream's query runs its next micro-batch as soon as the last one ends (Spark's default
trigger), or every ``jw.sqe.trigger.intervalSeconds`` (a processing-time trigger: fewer, larger
batches and less work while idle, for a later result), or, with ``sqe run --once``, over
what is there when it starts (Spark's AvailableNow trigger).

At the ``info`` and ``debug`` log levels (``sqe run --log-level info``),
:class:`TriggerTimes` logs Spark's own timing of each micro-batch it sees: the whole trigger
and its parts (asking the source for its latest offsets, planning, the write-ahead log,
``addBatch`` -- SQE's batch function -- and the commit log), which is where a batch's time
goes outside SQE's own batch line.

    >>> trigger_kwargs("once", None), trigger_kwargs("forever", 2.5)
    ({'availableNow': True}, {'processingTime': '2.5 seconds'})
    >>> trigger_kwargs("forever", None)
    {}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqe.logs import log_level

__all__ = ["TriggerTimes", "describe_durations", "trigger_kwargs"]

log = logging.getLogger("sqe")

#: Spark's parts of a trigger, in the order they happen.
_PARTS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def trigger_kwargs(mode: str, interval: float | None) -> dict[str, Any]:
    """The keyword arguments of ``DataStreamWriter.trigger`` for a run in ``mode`` with the
    stream's ``interval`` in seconds (``None`` or 0: the next batch as soon as the last ends;
    an empty dict: Spark's default trigger)."""
    if mode == "once":
        return {"availableNow": True}
    if interval:
        return {"processingTime": f"{interval:g} seconds"}
    return {}


def describe_durations(durations: Mapping[str, Any]) -> str:
    """Spark's ``durationMs`` of one trigger in seconds, the whole first, then its parts.

    >>> describe_durations({"triggerExecution": 1520, "addBatch": 1250, "latestOffset": 48})
    '1.52 s (latestOffset 0.05, addBatch 1.25, other 0.22)'
    """
    whole = int(durations.get("triggerExecution", 0))
    parts = [(name, int(durations[name])) for name in _PARTS if name in durations]
    other = whole - sum(ms for _, ms in parts)
    shown = [f"{name} {ms / 1000:.2f}" for name, ms in parts]
    if other > 0:
        shown.append(f"other {other / 1000:.2f}")
    return f"{whole / 1000:.2f} s ({', '.join(shown)})"


def _field(progress: Any, name: str) -> Any:
    """A field of a progress: an object in classic PySpark, a dict over Spark Connect."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)


class TriggerTimes:
    """Logs, at the info and debug log levels, Spark's timing of each new micro-batch of the
    queries it is shown (their last progress, read each time :meth:`log_new` is called: a
    batch shorter than the calls' interval may go unlogged)."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self.enabled = log_level() in ("info", "debug")

    def log_new(self, queries: Sequence[Any]) -> None:
        """Log the last progress of each query in ``queries`` not logged yet."""
        if not self.enabled:
            return
        for query in queries:
            progress = query.lastProgress
            if not progress:
                continue
            name, batch = str(_field(progress, "name")), int(_field(progress, "batchId"))
            if self._seen.get(name, -1) >= batch:
                continue
            self._seen[name] = batch
            rows = int(_field(progress, "numInputRows"))
            log.info(f"Spark trigger of {name} batch {batch}: {rows} rows in "
                      f"{describe_durations(_field(progress, 'durationMs'))}")
