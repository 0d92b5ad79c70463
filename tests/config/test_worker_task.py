"""begin_task: what is alive when a worker's task starts leaves the collector's walk; the task's
own garbage is still collected."""

from __future__ import annotations

import gc
import weakref

from sqe.config.worker_task import begin_task


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_what_is_alive_at_the_start_is_frozen_and_later_garbage_is_collected():
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
