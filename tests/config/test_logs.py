"""The libraries' log level and the collapsing of lines that repeat."""

from __future__ import annotations

import logging

import pytest

from sqe.logs import LOG_LEVEL_ENV, Collapse, kafka_logger, log_level, set_log_level


def _record(text: str) -> logging.LogRecord:
    return logging.LogRecord("sqe.kafka", logging.ERROR, __file__, 1, text, (), None)


def test_lines_that_differ_only_in_numbers_are_let_through_once_per_window(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 40.0, 41.0])
    monkeypatch.setattr("sqe.logs.time.monotonic", lambda: next(clock))
    f = Collapse(seconds=30)
    lines = [_record(f"127.0.0.1:{p}/bootstrap: Connect failed (after {p % 7}ms)")
             for p in (9092, 9093, 9094, 9095)] + [_record("another line")]
    passed = [f.filter(r) for r in lines]
    assert passed == [True, False, False, True, True]
    assert lines[3].getMessage().endswith("(2 more like it held back)")


def test_the_level_travels_in_the_environment_and_is_quiet_by_default(monkeypatch):
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    assert log_level() == "quiet" and kafka_logger().level > logging.CRITICAL
    set_log_level("warning")
    assert log_level() == "warning" and kafka_logger().level == logging.WARNING
    with pytest.raises(ValueError, match="log level must be one of quiet, error"):
        set_log_level("loud")
    monkeypatch.setenv(LOG_LEVEL_ENV, "quiet")
    kafka_logger()
