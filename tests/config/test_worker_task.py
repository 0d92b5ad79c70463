"""begin_task: what is alive when a worker's task starts leaves the collector's walk; the task's
own garbage is still collected."""

from __future__ import annotations

import gc
import os
import weakref

import sqe.config.worker_task as worker_task
from sqe.config.worker_task import FROZEN_TASKS, begin_task


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_what_is_alive_at_the_start_is_frozen_and_later_garbage_is_collected(monkeypatch):
    monkeypatch.setattr(worker_task, "_frozen", {})
    kept = _Node()
    try:
        begin_task()
        assert gc.get_freeze_count() > 0
        made = _Node()
        gone = weakref.ref(made)
        del made
        gc.collect()
        assert gone() is None  # the task's cycle is collected as before
        assert kept.me is kept
    finally:
        gc.unfreeze()


def test_a_long_running_worker_does_not_keep_each_tasks_leftovers(monkeypatch):
    """A cycle alive when a task starts and dropped later (a previous task's client, the
    metadata caches redis-py rebuilds) is freed once the first tasks have frozen what the
    process keeps: frozen at every task, each one was kept for good."""
    monkeypatch.setattr(worker_task, "_frozen", {})
    try:
        left = _Node()
        for _ in range(FROZEN_TASKS):
            begin_task()
            left = _Node()  # the task's leftover, alive when the next task starts
        frozen = gc.get_freeze_count()
        gone = []
        for _ in range(200):
            begin_task()
            gone.append(weakref.ref(left))
            left = _Node()
        gc.collect()
        assert gc.get_freeze_count() <= frozen  # none frozen since (frozen ones may have died)
        assert worker_task._frozen == {os.getpid(): FROZEN_TASKS}
        assert sum(ref() is not None for ref in gone) == 0
    finally:
        gc.unfreeze()


def test_the_first_task_makes_the_system_allocator_arrows_default_pool(monkeypatch):
    """Arrow's mimalloc kept what a worker's largest batch freed; the system allocator gives
    it back (bench/results/chain.md)."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    monkeypatch.setattr(worker_task, "_frozen", {})
    try:
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        begin_task()
        assert pa.default_memory_pool().backend_name == "system"
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        begin_task()  # a later task leaves the pool as it finds it
        assert pa.default_memory_pool().backend_name == "mimalloc"
    finally:
        pa.set_memory_pool(before)
        gc.unfreeze()
