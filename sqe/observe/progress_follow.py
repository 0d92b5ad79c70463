"""A run's batch reports, read back from its progress file, when its batches run elsewhere.

Over Spark Connect, ``foreachBatch`` runs in a Python process of the server, which cannot call
back into the client: each batch's report reaches the client only through the progress file
that the server-side batch appends it to (:class:`~sqe.observe.progress.ProgressLog`).
:class:`ProgressFollower` reads the lines that file gains, in a thread of the client, and
hands each report of this run (by the run's id) to the run's watchers, as a classic run's
``foreachBatch`` does in the same process.  An unfinished last line waits for its newline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from sqe.observe.batch_report import BatchReport
from sqe.observe.progress import parse_entry

__all__ = ["ProgressFollower"]

log = logging.getLogger("sqe")


class ProgressFollower:
    """Follows the progress file ``path`` from its current end, calling ``on_report`` with each
    report of run ``run`` as it is appended."""

    def __init__(self, path: Path, run: str, on_report: Callable[[BatchReport], None],
                 interval: float = 0.25) -> None:
        self.path, self.run, self.on_report, self.interval = path, run, on_report, interval
        self._offset = path.stat().st_size if path.exists() else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="sqe-progress-follower",
                                        daemon=True)

    def start(self) -> None:
        """Follow in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop following, after handing on what the file holds now."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        self.poll()

    def _follow(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        """Hand on the reports of the lines appended since the last poll."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only
        self._offset += end
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                entry = parse_entry(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning(f"warning: {self.path}: a line that is not a batch entry ({exc}); "
                            "the run's progress skips it")
                continue
            if entry.run == self.run:
                self.on_report(entry.report)
