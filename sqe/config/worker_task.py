"""What every task SQE runs in a Spark Python worker does first: settle the garbage collector.

Spark reuses its Python workers across tasks and batches, and its worker daemon runs
``gc.collect()`` after every task.  A full collection walks every object the process
holds: the modules the first task imported (pyspark, pyarrow, pandas, confluent-kafka,
redis-py, SQE) and the clients kept for later tasks -- about 100k objects, 40-100 ms a
task, so a worker spent 0.8 s of a 200,000-record batch collecting nothing (py-spy,
``bench/RESULTS.md``).  :func:`begin_task` freezes what is alive when a task starts, so
those collections walk only what the task itself made; that is collected as before.
"""

from __future__ import annotations

import gc

__all__ = ["begin_task"]


def begin_task() -> None:
    """Keep the objects alive now out of every later collection (``gc.freeze``): modules and
    kept clients are never garbage, and the objects a task makes are collected as before."""
    gc.freeze()
