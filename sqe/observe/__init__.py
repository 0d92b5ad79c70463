"""Observing a run: what each micro-batch did, where it is kept, and who is told.

Owns the one declaration of a batch's counters (:mod:`~sqe.observe.batch_report`), the
progress file under the checkpoint and its reading back (:mod:`~sqe.observe.progress`,
:mod:`~sqe.observe.progress_follow`), the watchers a run tells and the backlog poller
(:mod:`~sqe.observe.watch`), and the Prometheus counters behind ``sqe run --metrics-port``
(:mod:`~sqe.observe.metrics`). The run itself (:mod:`sqe.engine`) reports here; nothing here
runs a batch.

May import: :mod:`sqe.errors`, :mod:`sqe.wire` (the tallies), :mod:`sqe.config` (the extras a
watcher needs) and :mod:`sqe.source` (a stream's lag); never :mod:`sqe.engine`.
"""
