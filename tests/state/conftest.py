"""Fixtures of the state tests."""

from __future__ import annotations

import pytest

from support.replicated_redis import ReplicatedRedis


@pytest.fixture
def replicated(tmp_path):
    """A Redis primary, its replica and a Sentinel (real processes), stopped after the test."""
    redis_set = ReplicatedRedis(tmp_path / "redis")
    try:
        yield redis_set
    finally:
        redis_set.stop()
