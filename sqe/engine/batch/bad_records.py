"""Records a batch cannot take: finding them, and what ``badRecordPolicy`` does with them.

A step cannot take a record when

* its value does not decode (a JSON stream's value that is not a JSON object);
* a query cannot compute it: Spark's ANSI errors (a cast of a malformed value, a
  division by zero, an overflow);
* a state cannot hold what the query makes of it (:meth:`state.sink.Sink.rejects`,
  e.g. the NUL character in Postgres text).

Finding them costs nothing while a batch has none.  A value that does not decode
is seen by the deserializer's own pass; the others show as the batch's failure,
and only then are the records behind it looked for: a state's own conditions
over a query's output give them at once (:func:`records_at`, through the carried
StreamMetadata columns), anything else is found by bisection (:func:`locate`)
over the batch's records (each step a Spark job over the cached batch that
evaluates every query without writing; about ``log2(records) + 1`` jobs per bad
record).

``jw.sqe.spout.kafka.badRecordPolicy`` decides (:func:`apply_policy`): ``fail``
stops the batch with one sentence naming the first record's topic, partition and
offset and the reason; ``deadletter`` sends each record, unchanged, with its
reason and position in headers, to the dead-letter topic
(:class:`~sqe.source.dead_letters.DeadLetters`), and the batch runs again without
them: they are not written and move no high-water mark.  Under ``deadletter`` every
query is computed and checked before any state is written, so a record one query
cannot take is never written by another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.config.views import StreamSettings
from sqe.errors import BadRecordError
from sqe.source.dead_letters import DeadLetters
from sqe.wire.columns import carried_offset
from sqe.wire.keys import CHUNK_INDEX_BITS

__all__ = ["MAX_BAD_RECORDS", "BadRecord", "BadRecordError", "StepFailure", "apply_policy",
           "bad_rows", "locate", "records_at", "row_level", "spark_reason", "without"]

#: The most bad records one batch may dead-letter; more is a broken upstream, not bad luck.
MAX_BAD_RECORDS = 1000



@dataclass(frozen=True)
class BadRecord:
    """One record a step cannot take, where it is, and why."""

    topic: str
    partition: int
    offset: int  # the Kafka offset of the record (of a chunk: the chunk record's)
    index: int | None  # a chunk message's position in its chunk
    key: bytes | None
    value: bytes | None
    reason: str

    @property
    def carried_offset(self) -> int:
        """The offset it carries to the next hop (:func:`~sqe.wire.columns.carried_offset`)."""
        return self.offset if self.index is None else (
            self.offset << CHUNK_INDEX_BITS) + self.index

    def where(self) -> str:
        """``topic/partition offset N`` (and the message of a chunk)."""
        message = f" message {self.index}" if self.index is not None else ""
        return f"{self.topic}/{self.partition} offset {self.offset}{message}"


class StepFailure(Exception):
    """A step of the batch failed on the records it was given (carries where and why)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def row_level(exc: BaseException) -> bool:
    """Whether ``exc`` may come from one record's value (a Spark runtime error), as opposed to
    the query itself (an analysis error) or a service."""
    return isinstance(exc, CapturedException) and not isinstance(exc, AnalysisException)


def spark_reason(exc: BaseException) -> str:
    """The first sentence of a Spark error (without its advice and SQLSTATE); of a Python
    worker's error, its last line (the exception, not the trace)."""
    text = exc.getMessage() if isinstance(exc, CapturedException) else str(exc)
    if "Traceback (most recent call last)" in text:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()
                 and not line.strip().startswith("SQLSTATE")]
        return lines[-1]
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    cut = first.find(". ")
    return first[:cut] if cut > 0 else first.rstrip(".")


_IDENTITY = ("_topic", "_partition", "_offset", "_index", "_key", "_value")


def bad_rows(frame: DataFrame, condition: Column, reason: Column, limit: int) -> list[BadRecord]:
    """The records of ``frame`` (source columns) where ``condition`` holds, with ``reason``."""
    rows = (frame.where(condition).select(*_IDENTITY, reason.alias("_sqe_reason"))
            .orderBy("_partition", "_offset", "_index").limit(limit).collect())
    return [BadRecord(r["_topic"], r["_partition"], r["_offset"], r["_index"], r["_key"],
                      r["_value"], r["_sqe_reason"]) for r in rows]


def _slice(frame: DataFrame, ids: Sequence[tuple[int, int]]) -> DataFrame:
    """The records of ``frame`` whose (partition, carried offset) lie in ``ids`` (sorted)."""
    spans: dict[int, tuple[int, int]] = {}
    for part, off in ids:
        lo, hi = spans.get(part, (off, off))
        spans[part] = (min(lo, off), max(hi, off))
    c = carried_offset()
    cond = F.lit(False)
    for part, (lo, hi) in spans.items():
        cond = cond | ((F.col("_partition") == part) & c.between(lo, hi))
    return frame.where(cond)


def locate(frame: DataFrame, evaluate: Callable[[DataFrame], None], limit: int,
           known: StepFailure | None = None) -> list[BadRecord]:
    """The records of ``frame`` (the batch's source rows) on which ``evaluate`` raises a
    :class:`StepFailure` alone, by bisection; at most ``limit`` of them.  Empty when the
    failure needs several records together (e.g. an overflowing sum).  ``known``: the
    failure ``evaluate`` already gave on the whole of ``frame`` (it is not run again).

    When the left half of a failing part passes, the right half is taken to fail without
    trying it (one job saved per level); a record reached that way is tried alone before it
    is named, so a failure of several records together names none of them.
    """
    ids = [(r[0], r[1]) for r in frame.select("_partition", carried_offset())
           .orderBy("_partition", carried_offset()).collect()]
    found: list[tuple[tuple[int, int], StepFailure]] = []

    def fails(part: Sequence[tuple[int, int]]) -> StepFailure | None:
        try:
            evaluate(_slice(frame, part))
        except StepFailure as failure:
            return failure
        return None

    def search(part: Sequence[tuple[int, int]], known: StepFailure | None,
               proven: bool) -> None:
        if len(found) >= limit or not part:
            return
        if known is None or (len(part) == 1 and not proven):
            known, proven = fails(part), True
            if known is None:
                return
        if len(part) == 1:
            found.append((part[0], known))
            return
        left, right = part[:len(part) // 2], part[len(part) // 2:]
        failure = fails(left)
        if failure is None:
            search(right, known, False)
        else:
            search(left, failure, True)
            search(right, None, False)

    search(ids, known, known is not None)
    return [records_at(frame, [key], f"{failure.where}: {failure.reason}", 1)[0]
            for key, failure in found]


def _by_id(frame: DataFrame, ids: Sequence[tuple[int, int]], how: str) -> DataFrame:
    """``frame`` (source columns) joined ``how`` with ``ids``: (partition, carried offset)
    pairs, the identity of a record through every query (a broadcast join, not a chain of
    conditions, whatever their number)."""
    keys = frame.sparkSession.createDataFrame([(int(p), int(o)) for p, o in ids],
                                              "_sqe_p int, _sqe_o long")
    return frame.join(F.broadcast(keys), (F.col("_partition") == F.col("_sqe_p"))
                      & (carried_offset() == F.col("_sqe_o")), how)


def records_at(frame: DataFrame, ids: Sequence[tuple[int, int]], reason: str, limit: int
               ) -> list[BadRecord]:
    """The records of ``frame`` (source columns) at ``ids`` ((partition, carried offset)
    pairs, as the carried StreamMetadata columns of a query's output hold them)."""
    return bad_rows(_by_id(frame, ids, "left_semi"), F.lit(True), F.lit(reason), limit)


def without(frame: DataFrame, bad: Sequence[BadRecord]) -> DataFrame:
    """``frame`` (source columns) without the records in ``bad``."""
    if not bad:
        return frame
    return _by_id(frame, [(b.partition, b.carried_offset) for b in bad], "left_anti")


def apply_policy(stream: StreamSettings, bad: Sequence[BadRecord]) -> int:
    """Fail naming the first of ``bad``, or dead-letter them all; returns how many were sent."""
    if not bad:
        return 0
    first = bad[0]
    if stream.bad_record_policy != "deadletter":
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise BadRecordError(
            f"bad record at {first.where()}{more}: {first.reason}; the batch fails and nothing "
            "of it is committed (jw.sqe.spout.kafka.badRecordPolicy: deadletter sends such "
            "records to a dead-letter topic and goes on)")
    if len(bad) > MAX_BAD_RECORDS:
        raise BadRecordError(
            f"more than {MAX_BAD_RECORDS} bad records in one batch, the first at "
            f"{first.where()}: {first.reason}; the batch fails rather than dead-letter them "
            "all (is the upstream or the topology broken?)")
    dead = DeadLetters(stream)
    for b in bad:
        dead.send(b.topic, b.partition, b.offset, b.key, b.value, b.reason)
    dead.finish()
    return len(bad)
