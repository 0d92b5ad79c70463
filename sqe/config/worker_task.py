"""What every task SQE runs in a Spark Python worker does first: settle the garbage collector
and Arrow's allocator.

Spark reuses its Python workers across tasks and batches, and its worker daemon runs
``gc.collect()`` after every task.  A full collection walks every object the process
holds: the modules the first task imported (pyspark, pyarrow, pandas, confluent-kafka,
redis-py, SQE) and the clients kept for later tasks -- about 100k objects, 40-100 ms a
task, so a worker spent 0.8 s of a 200,000-record batch collecting nothing (py-spy,
``bench/results/throughput.md``).  :func:`begin_task` freezes what is alive when each of a worker
process's first :data:`FROZEN_TASKS` tasks starts (the first tasks of each kind -- a read,
a state's write -- import the modules and make the clients later tasks keep), so those
collections walk only what later tasks make.

Only the first tasks: ``gc.freeze`` moves objects out of reach of every later collection,
and an object frozen while alive that later becomes part of an unreachable cycle is never
freed.  Frozen at every task, each task's leftovers were: the cycles ``importlib.metadata``
rebuilds when redis-py asks for its version at every new connection (pyspark's worker calls
``importlib.invalidate_caches()`` before every task), a previous task's client, its
TaskContext.  A worker of load.yaml grew by about 0.7 MB a minute for as long as it ran
(``bench/results/soak.md``); now what the first tasks leave is all it keeps.

Arrow's default allocator (mimalloc in pyarrow's wheels) keeps the memory a task freed for
later allocations of the process, so a worker's resident memory stayed at the high mark of
its largest batch: load.yaml's worker peaked at 330 MB over a batch of 1,000,000 records.
:func:`begin_task` makes the process's default pool the system allocator's, which gives
freed memory back: 292 MB, as fast (``bench/chain.py``; ``bench/results/chain.md``).
"""

from __future__ import annotations

import gc
import os

import pyarrow as pa

__all__ = ["FROZEN_TASKS", "begin_task"]

#: How many of a worker process's first tasks freeze what is alive when they start.
FROZEN_TASKS = 16

_frozen: dict[int, int] = {}  # pid -> tasks that froze (a forked child counts its own)


def begin_task() -> None:
    """Keep the objects alive now out of every later collection (``gc.freeze``), in each of
    this process's first :data:`FROZEN_TASKS` tasks: modules and kept clients are never
    garbage, and what later tasks make, cycles included, is collected as before; at the
    first, make the system allocator Arrow's default pool."""
    pid = os.getpid()
    done = _frozen.get(pid, 0)
    if done >= FROZEN_TASKS:
        return
    if done == 0:  # this process's first task
        pa.set_memory_pool(pa.system_memory_pool())
    gc.freeze()
    _frozen.clear()  # a forked child's copy of its parent's count is not its own
    _frozen[pid] = done + 1
