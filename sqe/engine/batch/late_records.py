"""Records Spark dropped as later than a hop's watermark, counted in the hop's batch reports.

A stateful hop's watermark drops records that arrive later than it, as Spark drops them
without SQE; Spark counts them per batch in its progress (``numRowsDroppedByWatermark`` of
each state operator), which it reports once the batch is done, after SQE's commit.
:class:`LateRecords` is a streaming query listener that adds the count to the batch's report
(:attr:`~sqe.observe.batch_report.BatchReport.late_dropped`) and says it in a line of the log;
it removes itself once its query ends, so a session that runs a hop again keeps one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql.streaming import StreamingQueryListener, StreamingQueryManager

from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.observe.batch_report import BatchReport

__all__ = ["LateRecords", "late_in"]

log = logging.getLogger("sqe")


def late_in(progress: object) -> int:
    """The records a batch's progress says its state operators dropped as late."""
    operators = getattr(progress, "stateOperators", None) or []
    return sum(int(getattr(op, "numRowsDroppedByWatermark", 0) or 0) for op in operators)


class LateRecords(StreamingQueryListener):
    """Adds each batch's late records to its report (see the module docstring): the query is
    the one on ``checkpoint`` (its id read from the checkpoint once the query has started);
    ``reports`` gives the hop's reports, ``base`` the id the stores count Spark's batch 0 as;
    ``streams``: the session's queries, which it is added to."""

    def __init__(self, consumer: str, checkpoint: StreamCheckpoint,
                 reports: Callable[[], list[BatchReport]], base: int,
                 streams: StreamingQueryManager) -> None:
        self.consumer, self.checkpoint, self.reports, self.base = (consumer, checkpoint,
                                                                    reports, base)
        self._query: str | None = None
        self._streams = streams
        streams.addListener(self)

    def _mine(self, event: object) -> bool:
        if self._query is None:
            self._query = self.checkpoint.query_id()
        return self._query is not None and str(getattr(event, "id", "")) == self._query

    def onQueryStarted(self, event: object) -> None:
        """Nothing: the counts come with each batch's progress."""

    def onQueryIdle(self, event: object) -> None:
        """Nothing."""

    def onQueryTerminated(self, event: object) -> None:
        """Leave the session's listeners once this hop's query ended."""
        if self._mine(event):
            self._streams.removeListener(self)

    def onQueryProgress(self, event: object) -> None:
        """Count the batch's late records, if it is this hop's and it dropped any."""
        progress = getattr(event, "progress", None)
        late = late_in(progress)
        if not late or not self._mine(progress):
            return
        batch_id = self.base + int(getattr(progress, "batchId", -1))
        for report in self.reports():
            if report.batch_id == batch_id:
                report.late_dropped = late
        log.warning(f"warning: {self.consumer} batch {batch_id}: Spark dropped {late} records "
                    "later than the watermark (numRowsDroppedByWatermark)")
