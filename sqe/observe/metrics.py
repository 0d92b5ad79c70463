"""A run's counters for Prometheus: the watcher behind ``sqe run --metrics-port``.

:class:`PrometheusWatcher` keeps the series below in a registry of its own and
serves them over HTTP (``/metrics``, Prometheus' text format) from when the run
starts until it ends.  Every series carries the labels ``topology`` and
``stream``; counters count what this process did since it started.

====================================  =========  =====================================
series                                type       labels beyond topology, stream
====================================  =========  =====================================
``sqe_batches_total``                 counter    ``outcome`` (committed, skipped)
``sqe_records_read_total``            counter
``sqe_replays_dropped_total``         counter
``sqe_unjudged_keys_total``           counter    (keys that cannot be judged, passed)
``sqe_values_not_json_total``         counter
``sqe_dead_letters_total``            counter
``sqe_chunks_read_total``             counter
``sqe_chunks_skipped_total``          counter    ``reason`` (bloom, hwm)
``sqe_chunk_false_positives_total``   counter
``sqe_rows_written_total``            counter    ``state``
``sqe_entries_merged_total``          counter    ``state`` (aggregate states)
``sqe_batch_duration_seconds``        histogram
``sqe_last_batch_id``                 gauge      (as the stores count it)
``sqe_last_batch_end_time_seconds``   gauge      (Unix time)
``sqe_backlog_records``               gauge      ``topic``, ``partition``
``sqe_end_offset``                    gauge      ``topic``, ``partition``
``sqe_committed_offset``              gauge      ``topic``, ``partition``
====================================  =========  =====================================

Example::

    >>> w = PrometheusWatcher(port=9108)                           # doctest: +SKIP
    >>> sqe.run("topologies/enrich.yaml", watchers=[w], once=True)  # doctest: +SKIP
"""

from __future__ import annotations

import errno
import time
from collections.abc import Sequence
from typing import Any

from sqe.config.extras import require
from sqe.errors import PrerequisiteError
from sqe.observe.batch_report import BatchReport
from sqe.observe.watch import RunWatcher, StreamView
from sqe.source.kafka.lag import PartitionLag

__all__ = ["BATCH_SECONDS_BUCKETS", "PrometheusWatcher"]

#: The batch duration histogram's buckets, in seconds.
BATCH_SECONDS_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

_BASE = ("topology", "stream")
_PARTITION = (*_BASE, "topic", "partition")

#: name -> (help, extra labels) of the counters
_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sqe_batches_total": ("Micro-batches done: committed, or skipped as committed before",
                          ("outcome",)),
    "sqe_records_read_total": ("Records read from the source, replays included", ()),
    "sqe_replays_dropped_total": ("Records dropped at or below their high-water mark", ()),
    "sqe_unjudged_keys_total": ("Records whose keys cannot be judged, passed through", ()),
    "sqe_values_not_json_total": ("Values that are not JSON objects", ()),
    "sqe_dead_letters_total": ("Records sent to the dead-letter topic", ()),
    "sqe_chunks_read_total": ("Chunks read", ()),
    "sqe_chunks_skipped_total": ("Chunks skipped unread, by the Bloom filter or the HWM",
                                 ("reason",)),
    "sqe_chunk_false_positives_total": ("Chunks the Bloom filter let through with no match", ()),
    "sqe_rows_written_total": ("Rows written per state", ("state",)),
    "sqe_entries_merged_total": ("Aggregate entries merged per aggregating state", ("state",)),
}

#: name -> help of the per-partition gauges
_PARTITION_GAUGES = {
    "sqe_backlog_records": "Records in the partition not yet read by a committed batch",
    "sqe_end_offset": "The partition's high watermark (offset of the next record written)",
    "sqe_committed_offset": "The next offset the run reads in the partition",
}


class PrometheusWatcher(RunWatcher):
    """Serves a run's counters, batch durations and backlog on ``address:port/metrics``."""

    def __init__(self, port: int, address: str = "0.0.0.0") -> None:
        self.port = port
        self.address = address
        prom = self._prometheus = require("prometheus_client", "--metrics-port")
        Counter, Gauge, Histogram = prom.Counter, prom.Gauge, prom.Histogram
        prom.disable_created_metrics()  # no *_created series beside each counter: dashboard noise
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self.counters = {name: Counter(name.removesuffix("_total"), text, [*_BASE, *extra],
                                       registry=self.registry)
                         for name, (text, extra) in _COUNTERS.items()}
        self.duration = Histogram("sqe_batch_duration_seconds", "Micro-batch duration", _BASE,
                                  buckets=BATCH_SECONDS_BUCKETS, registry=self.registry)
        self.last_batch = Gauge("sqe_last_batch_id", "The last batch done, as the stores "
                                "count it", _BASE, registry=self.registry)
        self.last_end = Gauge("sqe_last_batch_end_time_seconds", "When the last batch ended "
                              "(Unix time)", _BASE, registry=self.registry)
        self.partition_gauges = {name: Gauge(name, text, _PARTITION, registry=self.registry)
                                 for name, text in _PARTITION_GAUGES.items()}
        self._topology = ""
        self._server: Any = None

    def started(self, streams: Sequence[StreamView]) -> None:
        """Serve from now on; every stream's series exist (at 0) from the start."""
        self._topology = streams[0].topology if streams else ""
        for view in streams:
            labels = (self._topology, view.stream)
            for name, (_, extra) in _COUNTERS.items():
                if not extra:
                    self.counters[name].labels(*labels)
            for outcome in ("committed", "skipped"):
                self.counters["sqe_batches_total"].labels(*labels, outcome)
            for reason in ("bloom", "hwm"):
                self.counters["sqe_chunks_skipped_total"].labels(*labels, reason)
            self.duration.labels(*labels)
        self.serve()

    def serve(self) -> None:
        """Start the HTTP server (once; ``sqe run`` does it before Spark starts); a port in
        use is a :class:`PrerequisiteError` saying so."""
        if self._server is not None:
            return
        try:
            self._server, _ = self._prometheus.start_http_server(self.port, self.address,
                                                                 self.registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PrerequisiteError(f"--metrics-port {self.port}: the port is in use on "
                                        f"{self.address}; choose another") from None
            raise PrerequisiteError(f"--metrics-port {self.port}: cannot serve metrics on "
                                    f"{self.address}: {exc.strerror or exc}") from None

    def batch_done(self, report: BatchReport) -> None:
        labels = (self._topology, report.stream)
        c = self.counters
        c["sqe_batches_total"].labels(*labels, "skipped" if report.skipped else "committed").inc()
        self.last_batch.labels(*labels).set(report.batch_id)
        self.last_end.labels(*labels).set(time.time())
        if report.skipped:
            return
        t = report.source
        for name, value in (("sqe_records_read_total", report.records_read),
                            ("sqe_replays_dropped_total", report.replays_dropped),
                            ("sqe_unjudged_keys_total", report.unparseable_keys),
                            ("sqe_values_not_json_total", report.unparseable_values),
                            ("sqe_dead_letters_total", t.dead_letters),
                            ("sqe_chunks_read_total", t.chunks_read),
                            ("sqe_chunk_false_positives_total", t.chunks_false_positive)):
            c[name].labels(*labels).inc(value)
        c["sqe_chunks_skipped_total"].labels(*labels, "bloom").inc(t.chunks_skipped_bloom)
        c["sqe_chunks_skipped_total"].labels(*labels, "hwm").inc(t.chunks_skipped_hwm)
        for state, n in report.written.items():
            kind = "sqe_entries_merged_total" if state in report.merged else \
                "sqe_rows_written_total"
            c[kind].labels(*labels, state).inc(n)
        self.duration.labels(*labels).observe(report.duration_s)

    def backlog(self, stream: str, lags: Sequence[PartitionLag]) -> None:
        g = self.partition_gauges
        for lag in lags:
            labels = (self._topology, stream, lag.topic, str(lag.partition))
            g["sqe_backlog_records"].labels(*labels).set(lag.backlog)
            g["sqe_end_offset"].labels(*labels).set(lag.end)
            g["sqe_committed_offset"].labels(*labels).set(lag.position)

    def ended(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
