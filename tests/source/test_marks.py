"""A task's marks (sqe.source.marks): read for the pairs it meets, once each, from a real Redis."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import sqe.source.marks
from sqe.cli.local_services import free_port
from sqe.clients.redis_clients import kept_count
from sqe.errors import SourceError
from sqe.ledger.hwm import HwmStore
from sqe.source.kafka.config import SourceConfig
from sqe.source.marks import TaskMarks


def _cfg(url: str) -> SourceConfig:
    return SourceConfig.from_options({"topic": "t", "brokers": "127.0.0.1:1",
                                      "filterReplays": "true", "hwmConsumer": "task/Stream",
                                      "filterReplays.redis.url": url})


def test_the_docstring_example():
    assert doctest.testmod(sqe.source.marks).failed == 0


def test_each_pair_is_asked_for_once_and_only_new_pairs_cost_a_round_trip():
    asked: list[list[tuple[int, int]]] = []
    store = {(1, 0): 10, (1, 1): 20, (2, 0): 5}

    def fetch(pairs):
        asked.append(sorted(pairs))
        return {p: store[p] for p in pairs if p in store}

    marks = TaskMarks(fetch)
    marks.meet(np.array([1, 1, 1, 9]), np.array([0, 0, 1, 0]), np.array([True, True, True, False]))
    marks.now[(1, 0)] = 12  # the filter moved it
    marks.meet(np.array([1, 1]), np.array([0, 1]), np.array([True, True]))  # nothing new
    marks.meet(np.array([1, 3]), np.array([0, 3]), np.array([True, True]))
    assert asked == [[(1, 0), (1, 1)], [(3, 3)]] and marks.round_trips == 2
    assert marks.start == {(1, 0): 10, (1, 1): 20}
    assert marks.now == {(1, 0): 12, (1, 1): 20}  # a later read never moves a mark back


@pytest.mark.redis
def test_marks_from_the_store_read_what_the_task_meets(redis_url):
    store = HwmStore.from_url(redis_url, "task/Stream", 3600)
    store.commit(0, {(4, p): 100 + p for p in range(2000)})
    marks = TaskMarks.from_store(_cfg(redis_url))
    try:
        marks.meet(np.array([4, 4, 5]), np.array([3, 1999, 0]), np.ones(3, dtype=bool))
        assert marks.start == {(4, 3): 103, (4, 1999): 2099} and marks.round_trips == 1
        kept = kept_count()
        again = TaskMarks.from_store(_cfg(redis_url))  # a later task of the same worker
        again.meet(np.array([4]), np.array([7]), np.ones(1, dtype=bool))
        assert again.start == {(4, 7): 107} and kept_count() == kept  # the same client
    finally:
        store.client.close()


def test_an_unreachable_store_is_one_sentence_naming_the_consumer():
    marks = TaskMarks.from_store(_cfg(f"redis://127.0.0.1:{free_port()}/0"))
    with pytest.raises(SourceError, match="cannot read the high-water marks of consumer "
                                          "task/Stream: .*127.0.0.1"):
        marks.meet(np.array([1]), np.array([0]), np.array([True]))
