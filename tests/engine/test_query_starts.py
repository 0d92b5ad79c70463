"""A query whose Python process does not connect back within Spark's fixed 10 s (a busy
machine) is started again from its checkpoint inside the run, each time said, and a run
where it never does ends with one sentence (``sqe.engine.run.query_starts``)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

import sqe
from sqe.engine.run.query_starts import QueryStarts
from sqe.engine.spark.worker_python import local_worker_python
from sqe.errors import RunError
from tests.support import fixed_words, sqe_cli

RUNNER = "python_streaming_source_runner"


def slow_planner(tmp_path: Path, slow_starts: int) -> dict[str, str]:
    """The environment of a run whose stream planner (the Python process Spark starts for the
    query's source) takes 12 s to start the first ``slow_starts`` times, each start a line of
    ``tmp_path/starts`` (a late planner's traceback, which can come after the run's last line
    on a busy machine, goes to a file of its own)."""
    slow = tmp_path / "slow-python"
    slow.write_text(f"""#!/bin/sh
case "$*" in *{RUNNER}*)
  echo start >> {tmp_path}/starts
  if [ "$(wc -l < {tmp_path}/starts)" -le {slow_starts} ]; then
    sleep 12  # too late: what it says when its connection is refused is kept apart
    exec {local_worker_python()} "$@" 2>> {tmp_path}/late-starts.err
  fi;;
esac
exec {local_worker_python()} "$@"
""")
    slow.chmod(0o755)
    return {"PYSPARK_PYTHON": str(slow), "PYSPARK_DRIVER_PYTHON": str(slow)}


def _run(tmp_path: Path, slow_starts: int) -> subprocess.CompletedProcess:
    """``sqe run --once`` of :func:`fixed_words` with :func:`slow_planner`."""
    topology = fixed_words(tmp_path, "n")
    return sqe_cli("run", str(topology), "--once", "--checkpoint", str(tmp_path / "ck"),
                   env=slow_planner(tmp_path, slow_starts))


@pytest.mark.slow
def test_a_planner_slower_than_spark_waits_twice_is_started_again_and_writes_once(tmp_path):
    done = _run(tmp_path, slow_starts=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "starts").read_text().split()) == 3
    for attempt in (2, 3):
        assert (f"warning: words.Words: a Python process Spark started for the query did not "
                f"connect back within Spark's 10 s (a busy machine); starting the query again "
                f"from its checkpoint ({attempt} of 3)") in done.stderr, done.stderr
    assert sorted(x for x in done.stdout.splitlines() if x.startswith("out:")) == [
        "out: word='a', x=1", "out: word='b', x=2"], done.stdout


@pytest.mark.slow
def test_a_planner_that_never_connects_back_in_time_ends_the_run_in_one_sentence(tmp_path):
    done = _run(tmp_path, slow_starts=99)
    assert done.returncode == 1, done.stderr[-3000:]
    assert len((tmp_path / "starts").read_text().split()) == 3
    assert done.stderr.splitlines()[-1] == (
        f"error: {tmp_path / 'words.yaml'}: words.Words: a Python process Spark started for "
        "the query did not connect back within Spark's fixed 10 s, 3 times in a row: the "
        "machine is too busy to start Python in time (fewer processes on it, or more cores); "
        "what its batches committed stays committed, and the next run continues from the "
        "checkpoint"), done.stderr
    assert "out:" not in done.stdout


class _Failed:
    """A query that failed because its Python process did not connect back (what the two
    real runs above cause): only what QueryStarts reads of a StreamingQuery."""

    recentProgress: list = []

    def exception(self) -> Exception:
        return RuntimeError("[STREAM_FAILED] ... Python worker failed to connect back.")


def test_a_query_failing_so_as_the_run_ends_is_said_and_not_started_again(caplog):
    started: list[str] = []
    starts = QueryStarts([])
    starts.start("t.In", lambda: started.append("start") or _Failed())
    with caplog.at_level(logging.WARNING, logger="sqe"):
        assert starts.check(ending=True) is False
    assert started == ["start"]
    assert "as the run's time ended; the next run continues from its checkpoint" in caplog.text
    assert starts.check() is True and started == ["start", "start"]  # in the run: again


class _Query:
    """A hop's query as :meth:`sqe.Hop.run` waits on it: its wait raises ``failure`` (a
    Python process that did not connect back, or another), or returns."""

    def __init__(self, failure: str | None, progress: bool = False) -> None:
        self.failure = failure
        self.recentProgress = [{"batchId": 0}] if progress else []

    def awaitTermination(self, timeout: float | None = None) -> bool:
        if self.failure is not None:
            raise PySparkException(message=self.failure)
        return True

    def exception(self) -> Exception | None:
        return PySparkException(message=self.failure) if self.failure is not None else None


class _Writer:
    """A streaming writer whose starts give ``queries``, one per start."""

    def __init__(self, *queries: _Query) -> None:
        self.queries = list(queries)
        self.starts = 0

    def start(self) -> _Query:
        self.starts += 1
        return self.queries.pop(0)


NOT_BACK = "[STREAM_FAILED] Query [id = 1] terminated: Python worker failed to connect back."


def test_a_hop_run_starts_again_a_query_whose_python_did_not_connect_back(caplog) -> None:
    hop = sqe.Hop("load.enriched", topic="enriched")
    done = _Query(None)
    writer = _Writer(_Query(NOT_BACK), _Query(NOT_BACK), _Query(NOT_BACK, progress=True),
                     _Query(NOT_BACK), done)
    with caplog.at_level(logging.WARNING, logger="sqe"):
        assert hop.run(writer) is done  # type: ignore[arg-type]
    assert writer.starts == 5  # the third start ran a batch: a new count of three from it
    assert caplog.text.count("warning: load.enriched: a Python process Spark started for the "
                             "query did not connect back within Spark's 10 s (a busy "
                             "machine); starting the query again from its checkpoint") == 4


def test_a_hop_run_whose_python_never_connects_back_ends_in_one_sentence() -> None:
    writer = _Writer(*(_Query(NOT_BACK) for _ in range(4)))
    with pytest.raises(RunError) as raised:
        sqe.Hop("load.enriched", topic="enriched").run(writer)  # type: ignore[arg-type]
    assert writer.starts == 3
    assert str(raised.value) == (
        "load.enriched: a Python process Spark started for the query did not connect back "
        "within Spark's fixed 10 s, 3 times in a row: the machine is too busy to start Python "
        "in time (fewer processes on it, or more cores); what its batches committed stays "
        "committed, and the next run continues from the checkpoint")


def test_a_hop_run_raises_any_other_failure_as_sqes_error_without_starting_again() -> None:
    writer = _Writer(_Query("[STREAM_FAILED] No space left on device"), _Query(None))
    with pytest.raises(RunError, match=r"^a disk the streaming query writes to is full"):
        sqe.Hop("load.enriched", topic="enriched").run(writer)  # type: ignore[arg-type]
    assert writer.starts == 1
