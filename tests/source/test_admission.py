"""Where a batch starts on PySpark without admission control, and what a run says of it."""

from __future__ import annotations

import pyspark

from sqe.source import admission
from sqe.source.admission import Position, limits_note


def test_the_position_is_the_end_of_the_last_batch_spark_planned():
    p = Position()
    assert p.start is None  # nothing planned yet: the query's start
    given = {"0": 10, "1": 4}
    p.seen(given)
    given["0"] = 99  # Spark's dict is not kept
    assert p.start == {"0": 10, "1": 4}


def test_a_run_without_admission_control_says_so_in_one_sentence(monkeypatch):
    monkeypatch.setattr(admission, "ADMISSION_CONTROL", False)
    capped, plain = limits_note(True), limits_note(False)
    assert capped is not None and plain is not None
    assert capped.startswith(f"pyspark {pyspark.__version__} has no admission control")
    assert "maxRecordsPerBatch themselves" in capped and "maxRecordsPerBatch" not in plain
    assert capped.count(". ") == 0 and capped.endswith("in one batch")
    monkeypatch.setattr(admission, "ADMISSION_CONTROL", True)
    assert limits_note(True) is None
