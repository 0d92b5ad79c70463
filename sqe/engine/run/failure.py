"""Why a streaming query failed, as one sentence, and as the SQE error it was.

A query that fails raises Spark's exception (a ``StreamingQueryException`` classic or over
Spark Connect, a ``Py4JJavaError``), whose text holds the Python traceback of the batch or
the task that failed, the JVM's stack, and somewhere inside them SQE's own sentence.
:func:`describe_failure` finds the sentence (a run's :class:`~sqe.errors.RunError` says it);
:func:`failure_error` gives it back as the :mod:`sqe.errors` class that raised it, so a hop's
failure reads as SQE's sentence first (:meth:`sqe.hop.Hop.await_termination`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqe.errors as errors
from sqe.engine.batch.processor import BatchProcessor
from sqe.engine.spark.connect_session import server_lost
from sqe.errors import RunError, SqeError

__all__ = ["describe_failure", "failure_error", "python_not_started"]

_PY_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+): (.+)$", re.M)
#: How the JVM says a Python worker's interpreter could not be started.
_NO_PYTHON = re.compile(r'Cannot run program "([^"]+)"(?: \(in directory "([^"]+)"\))?: '
                        r"error=\d+, ([^\n]+)")
#: Spark's words for two runs of one query writing the same batch to its checkpoint.
_CONCURRENT = re.compile(r"\[CONCURRENT_STREAM_LOG_UPDATE\][^\n]*?detected for (\d+)")
#: What Spark puts before the cause of a streaming query's failure: the query's ids.
_STREAM_FAILED = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
#: The classes a failure's text may name, by name, each made again from its sentence
#: (RefusedOption is made from an option key, and never ends a query).
_CLASSES: dict[str, type[SqeError]] = {name: getattr(errors, name) for name in errors.__all__
                                       if name != "RefusedOption"}


def python_not_started(text: str) -> str | None:
    """The sentence for a Python worker whose interpreter Spark could not start, found in the
    text of a failure, or None."""
    found = _NO_PYTHON.search(text)
    if found is None:
        return None
    path, where, why = found.groups()
    if where:
        place = f"in {where}"
    elif re.search(r"Lost task [\d.]+ in stage|executor \d+\)", text):
        place = "in the executors' working directories"
    else:
        place = "in the driver's working directory"
    return (f"Spark could not start the Python worker {path} (looked for {place}: "
            f"{why.strip()}); the executors run SQE's code in that Python: ship an environment "
            "with SQE (sqe pack, then spark-submit --archives sqe-env.tar.gz#environment with "
            "PYSPARK_PYTHON=./environment/bin/python), or set PYSPARK_PYTHON to an interpreter "
            "with SQE that every executor has")


def describe_failure(exc: BaseException, processors: Sequence[BatchProcessor] = ()) -> str:
    """The cause of a failed query as one sentence, without a JVM or Python trace."""
    return _cause(exc, processors)[1]


def failure_error(exc: BaseException, processors: Sequence[BatchProcessor] = ()) -> SqeError:
    """The failure ``exc`` of a query as the SQE error that caused it, with its sentence (a
    refusal raised in a batch, in a write task, on a Spark Connect server), else as a
    :class:`~sqe.errors.RunError` saying Spark's cause."""
    kind, sentence = _cause(exc, processors)
    return kind(sentence)


def _cause(exc: BaseException, processors: Sequence[BatchProcessor]
           ) -> tuple[type[SqeError], str]:
    """The class and the sentence of a failure (see :func:`describe_failure`)."""
    for proc in processors:
        if isinstance(proc.failure, SqeError):
            return type(proc.failure), str(proc.failure)
    lost = server_lost(exc)
    if lost is not None:
        return RunError, lost
    for failure in [exc, *(p.failure for p in processors if p.failure is not None)]:
        missing_python = python_not_started(str(failure))
        if missing_python:
            return errors.PrerequisiteError, missing_python
    text = str(exc)
    if "No space left on device" in text:
        return RunError, ("a disk the streaming query writes to is full (No space left on "
                          "device): its checkpoint's filesystem, or Spark's local directories "
                          "(spark.local.dir); make room and run again: the batch it was in is "
                          "committed whole or not at all")
    concurrent = _CONCURRENT.search(text)
    if concurrent:
        return RunError, (f"another run of this stream wrote batch {concurrent.group(1)} to "
                          "its checkpoint at the same time (CONCURRENT_STREAM_LOG_UPDATE: two "
                          "runs of one hop with one checkpoint), so this one stopped and the "
                          "other goes on; what the batches committed stays committed: run one "
                          "at a time per checkpoint")
    ours = [m for m in _PY_ERROR.finditer(text) if m.group(1) in _CLASSES]
    if ours:
        return _CLASSES[ours[-1].group(1)], ours[-1].group(2).strip()
    for proc in processors:
        if proc.failure is not None:
            text = str(proc.failure)
    matches = [m for m in _PY_ERROR.finditer(text) if m.group(1).endswith(("Error", "Exception"))]
    if matches:
        return RunError, f"{matches[-1].group(1)}: {matches[-1].group(2).strip()}"
    java = getattr(exc, "java_exception", None)  # a Py4JJavaError: its Java exception's line
    text = str(java.toString()) if java is not None else text
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return RunError, _STREAM_FAILED.sub("", first)[:500]
