"""Sample events on a real broker: two writers creating the same new topic at once both write."""

from __future__ import annotations

import uuid

import pytest

from sqe.cli.sample_events import produce_events
from tests.support.kafka_io import read_topic
from tests.support.race import race

pytestmark = [pytest.mark.kafka]


def test_two_writers_creating_one_new_topic_at_once_both_write(kafka_bootstrap):
    """Both find no topic and both create it; the one the broker answers TOPIC_ALREADY_EXISTS
    finds the other's topic and writes (before, it failed naming neither)."""
    for _ in range(5):
        topic = f"sample-{uuid.uuid4().hex[:12]}"
        outcome = race(2, lambda i, topic=topic: produce_events(
            kafka_bootstrap, topic, 20, partitions=2, start=20 * i))
        assert outcome == [20, 20]
        assert len(read_topic(kafka_bootstrap, topic)) == 40
