"""Watching a running topology: what a run tells its watchers, and its backlog poller.

A :class:`RunWatcher` is told when the run starts (a :class:`StreamView` per stream),
each time a stream finishes a micro-batch (its
:class:`~sqe.observe.batch_report.BatchReport`), every few seconds and after each
batch the backlog per partition of each ``sqe-kafka`` stream
(:class:`~sqe.source.kafka.lag.PartitionLag`, asked by :class:`BacklogPoller`), and when
the run ends.  ``sqe run``'s live progress (:mod:`sqe.cli.live`) and its
Prometheus endpoint (:mod:`sqe.observe.metrics`) are watchers.

Watching never fails a run: :class:`Watchers` calls each watcher in turn, one
at a time, and a watcher that raises is said once as a warning and not called
again; a backlog that cannot be asked (brokers away) is a warning once per
stream, and the poller asks again at its next turn.

Example::

    >>> class Count(RunWatcher):
    ...     def __init__(self): self.batches = 0
    ...     def batch_done(self, report): self.batches += 1
    >>> hub = Watchers([Count()])
    >>> hub.batch_done(BatchReport("Events", 0)); hub.watchers[0].batches
    1
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqe.errors import SourceError
from sqe.observe.batch_report import BatchReport
from sqe.source.kafka.config import SourceConfig
from sqe.source.kafka.lag import LagReader, PartitionLag

__all__ = ["BacklogPoller", "RunWatcher", "StreamView", "Watchers"]

log = logging.getLogger("sqe")


@dataclass(frozen=True)
class StreamView:
    """One stream of a run, as its watchers see it when the run starts."""

    topology: str
    stream: str
    consumer: str  # <topology>.<stream>
    topic: str | None  # the Kafka topic of an sqe-kafka stream; None: its backlog is unknown
    committed: Mapping[str, int] | None  # where its checkpoint's last batch ended, if any


class RunWatcher:
    """Told what a run does; override what you need (each method does nothing here)."""

    def started(self, streams: Sequence[StreamView]) -> None:
        """The run's streams start (before their first batch)."""

    def batch_done(self, report: BatchReport) -> None:
        """A stream committed a micro-batch (or skipped one committed before)."""

    def backlog(self, stream: str, lags: Sequence[PartitionLag]) -> None:
        """Stream ``stream``'s partitions: end offsets, what the run committed, the backlog."""

    def ended(self) -> None:
        """The run is over (done, stopped or failed)."""


class Watchers(RunWatcher):
    """The watchers of one run, called one at a time (batches of several streams end in
    threads of their own); one that raises is a warning, once, and is dropped.  With
    ``sources`` (stream name -> its ``sqe-kafka`` source) and a watcher to tell, a
    :class:`BacklogPoller` asks their backlog every ``interval`` seconds."""

    def __init__(self, watchers: Sequence[RunWatcher] = (),
                 sources: Mapping[str, SourceConfig] | None = None,
                 interval: float = 5.0) -> None:
        self.watchers = list(watchers)
        self._lock = threading.Lock()
        self._poller = (BacklogPoller(self, sources, interval) if sources and self.watchers
                        else None)

    def _each(self, method: str, *args: object) -> None:
        with self._lock:
            for w in list(self.watchers):
                try:
                    getattr(w, method)(*args)
                except Exception as exc:
                    self.watchers.remove(w)
                    log.warning(f"warning: {type(w).__name__} stopped watching the run: "
                                f"{method} failed with {type(exc).__name__}: {exc}")

    def started(self, streams: Sequence[StreamView]) -> None:
        self._each("started", streams)
        if self._poller is not None:
            self._poller.started(streams)

    def batch_done(self, report: BatchReport) -> None:
        if self._poller is not None:
            self._poller.batch_done(report)
        self._each("batch_done", report)

    def backlog(self, stream: str, lags: Sequence[PartitionLag]) -> None:
        self._each("backlog", stream, lags)

    def ended(self) -> None:
        if self._poller is not None:  # first, outside the lock its thread may wait for
            self._poller.ended()
        self._each("ended")


class BacklogPoller(RunWatcher):
    """Asks each ``sqe-kafka`` stream's partition ends every ``interval`` seconds and
    after each of its batches, and tells ``hub`` the backlog against what the run
    committed (the offsets of its last batch, else of its checkpoint's).  Its first
    question is asked when the run starts."""

    def __init__(self, hub: RunWatcher, sources: Mapping[str, SourceConfig],
                 interval: float = 5.0) -> None:
        self.hub = hub
        self.interval = interval
        self._readers = {name: LagReader(src) for name, src in sources.items()}
        self._committed: dict[str, Mapping[str, int] | None] = {}
        self._failing: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sqe-backlog", daemon=True)

    def started(self, streams: Sequence[StreamView]) -> None:
        for view in streams:
            self._committed[view.stream] = view.committed
        if self._readers:
            self._thread.start()

    def batch_done(self, report: BatchReport) -> None:
        if report.offsets:
            self._committed[report.stream] = report.offsets
        self._wake.set()

    def poll(self) -> None:
        """Ask every stream's partition ends once and tell the hub."""
        for name, reader in self._readers.items():
            try:
                lags = reader.lag(self._committed.get(name))
            except SourceError as exc:
                if name not in self._failing:
                    self._failing.add(name)
                    log.warning(f"warning: the backlog of {name} is unknown for now: {exc}")
                continue
            self._failing.discard(name)
            self.hub.backlog(name, lags)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._wake.wait(self.interval)
            self._wake.clear()

    def ended(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for reader in self._readers.values():
            reader.close()
