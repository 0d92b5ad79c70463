"""What each source task of a micro-batch read, reported to the HWM store for the batch's commit.

A hop's query is the user's: a windowed aggregation, a deduplication or a join hands back rows
that no longer say which records they came from, so the batch's new high-water marks cannot be
found in them.  With ``reportRead`` (set by :class:`sqe.Hop`), each source task that reads a
range of a streaming batch writes, when it has read it all, the JSON of a :class:`TaskRead`
-- the marks the task filtered by, the highest source offset it passed of each (pid, source
partition), and its counters -- to the key
``sqe:{<consumer>}:read:<topic>/<partition>/<start>/<end>``, and, where the task knows its
streaming query and batch (Spark's local properties; a ``foreachBatch`` over Spark Connect runs
its jobs without them), adds the key to the set ``sqe:{<consumer>}:reads:<query>:<batch>``.
The batch's commit adds the reads up (:func:`batch_read`) instead of looking at rows, finding
the keys by the ranges the checkpoint's offsets name, or by the set; nothing on the driver
scales with the records.

A task that finds its own key already there (Spark runs the batch again: a task retried, a
cache lost, or the whole batch after a restart whose commit the HWM store holds already) filters
by the marks it recorded, not by the store's, so every run of a batch passes the same records: a
stateful operator's state, which Spark computes again from the batch's input, comes out as the
first run made it.  A batch's keys are deleted by the next batch's commit (Spark writes batch
N+1's offsets only once batch N is done) and expire with the marks' TTL.

Example (what one task read, as the commit reads it)::

    >>> read = TaskRead({(7, 0): 41, (8, 1): None}, {(7, 0): 45}, rows=4)
    >>> TaskRead.load(read.dump()).marks
    {(7, 0): 45}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sqe.errors import StateError
from sqe.ledger.hwm import HwmStore, consumer_tag
from sqe.ledger.retry import answered
from sqe.source.marks import TaskMarks, with_store
from sqe.wire.columns import Tally

if TYPE_CHECKING:  # the Kafka source's package imports this module
    from sqe.source.kafka.config import RangePartition, SourceConfig

__all__ = ["BATCH_PROPERTY", "QUERY_PROPERTY", "BatchRead", "RangeRead", "TaskRead",
           "batch_key", "batch_read", "range_key", "task_batch"]

Pair = tuple[int, int]

#: The local properties of a streaming batch's Spark jobs that name its query and batch.
QUERY_PROPERTY = "sql.streaming.queryId"
BATCH_PROPERTY = "streaming.sql.batchId"


def range_key(consumer: str, topic: str, partition: int, start: int, end: int) -> str:
    """The key of what the task of one range read."""
    return f"sqe:{{{consumer_tag(consumer)}}}:read:{topic}/{partition}/{start}/{end}"


def batch_key(consumer: str, query: str, spark_batch: int) -> str:
    """The set of the range keys of ``query``'s batch ``spark_batch``."""
    return f"sqe:{{{consumer_tag(consumer)}}}:reads:{query}:{spark_batch}"


def task_batch() -> tuple[str, int] | None:
    """The streaming query's id and Spark's batch id of the task running here, or None outside
    a streaming batch (a batch read, a test)."""
    from pyspark import TaskContext  # an executor's, only in a task

    ctx = TaskContext.get()
    if ctx is None:
        return None
    query, batch = ctx.getLocalProperty(QUERY_PROPERTY), ctx.getLocalProperty(BATCH_PROPERTY)
    if not query or batch is None or not str(batch).lstrip("-").isdigit():
        return None
    return str(query), int(batch)


def _pairs(text: Mapping[str, Any]) -> dict[Pair, Any]:
    out: dict[Pair, Any] = {}
    for key, value in text.items():
        pid, _, part = key.partition(":")
        out[(int(pid), int(part))] = None if value is None else int(value)
    return out


def _text(pairs: Mapping[Pair, int | None]) -> dict[str, int | None]:
    return {f"{pid}:{part}": value for (pid, part), value in pairs.items()}


@dataclass
class TaskRead:
    """What one task read of its range: ``start``, the mark of each pair it asked the store for
    (None: the store had none), ``marks``, the highest source offset it passed of each pair
    (where above ``start``), ``rows`` the record rows it yielded, ``unparseable`` those whose key
    is not a StreamMetadata, and its counters."""

    start: dict[Pair, int | None]
    marks: dict[Pair, int]
    rows: int = 0
    unparseable: int = 0
    tally: Tally = field(default_factory=Tally)

    def dump(self) -> str:
        """The field's value."""
        return json.dumps({"start": _text(self.start), "marks": _text(self.marks),
                           "rows": self.rows, "unparseable": self.unparseable,
                           "tally": {k: v for k, v in asdict(self.tally).items() if v}},
                          separators=(",", ":"))

    @classmethod
    def load(cls, text: str | bytes) -> TaskRead:
        """A field's value read back."""
        raw = json.loads(text)
        return cls(_pairs(raw["start"]), _pairs(raw["marks"]), int(raw["rows"]),
                   int(raw["unparseable"]), Tally(**raw.get("tally", {})))


@dataclass
class BatchRead:
    """What the tasks of one batch read, added up: the batch's new marks and counters (shaped as
    the one-pass tasks' result, so a batch report counts either the same way)."""

    marks: dict[Pair, int] = field(default_factory=dict)
    records: int = 0
    unparseable_keys: int = 0
    tally: Tally = field(default_factory=Tally)
    ranges: set[str] = field(default_factory=set)

    def add(self, name: str, read: TaskRead) -> None:
        """Add the task of range key ``name``."""
        self.ranges.add(name)
        for pair, offset in read.marks.items():
            if offset > self.marks.get(pair, offset - 1):
                self.marks[pair] = offset
        self.records += read.rows
        self.unparseable_keys += read.unparseable
        self.tally.add(read.tally)


def batch_read(reads: Mapping[str, bytes | str | None], where: str) -> BatchRead:
    """The batch whose range keys hold ``reads`` (None: a key not there).  A range not
    reported is a :class:`~sqe.errors.StateError` naming it."""
    out = BatchRead()
    missing = []
    for name, value in reads.items():
        if value is None:
            missing.append(name.rsplit(":read:", 1)[-1].replace("/", " ", 1))
        else:
            out.add(name, TaskRead.load(value))
    if missing:
        raise StateError(f"{where}: the source did not report reading "
                         f"{', '.join(sorted(missing)[:3])}{' ...' if len(missing) > 3 else ''} "
                         "(topic partition start end), so the batch's high-water marks are not "
                         "known; nothing of it is committed, and it runs again")
    return out


class RangeRead:
    """One task's report: what a run of the task before recorded (:attr:`prior`), and
    :meth:`write`, once the range is read."""

    def __init__(self, cfg: SourceConfig, key: str, prior: TaskRead | None) -> None:
        self.cfg, self.key, self.prior = cfg, key, prior
        self.rows = self.unparseable = 0  # the record rows yielded, those without StreamMetadata

    def saw(self, batch: pa.RecordBatch) -> None:
        """Count the record rows of ``batch``, which the task yields."""
        self.rows += batch.num_rows
        self.unparseable += batch.column("_pid").null_count

    @classmethod
    def begin(cls, cfg: SourceConfig, part: RangePartition) -> RangeRead | None:
        """The report of ``part``'s task when ``cfg`` reports reads (else None), with what a
        run of it before recorded."""
        if not cfg.report_read or not cfg.stream.filter_replays:
            return None
        key = range_key(str(cfg.hwm_consumer), part.topic, part.partition, part.start, part.end)
        raw = _call(cfg, "reading what the batch's tasks read before",
                    lambda store: store.client.get(key))
        return cls(cfg, key, TaskRead.load(raw) if raw else None)

    def marks(self) -> TaskMarks:
        """The marks the task filters by: those a run before recorded, else the store's."""
        return TaskMarks.from_store(self.cfg, self.prior.start if self.prior else None)

    def write(self, marks: TaskMarks, tally: Tally) -> None:
        """Record what the task read (it read its whole range), kept for the marks' TTL."""
        value = TaskRead(marks.started(), marks.advanced(), self.rows, self.unparseable,
                         tally).dump()
        ttl = max(1, self.cfg.stream.hwm_ttl)
        at = task_batch()

        def write(store: HwmStore) -> None:
            pipe = store.client.pipeline(transaction=False)
            pipe.set(self.key, value, ex=ttl)
            if at is not None:
                listed = batch_key(str(self.cfg.hwm_consumer), *at)
                pipe.sadd(listed, self.key)
                pipe.expire(listed, ttl)
            pipe.execute()

        _call(self.cfg, "reporting what the task read", write)


def _call(cfg: SourceConfig, action: str, call: Any) -> Any:
    """``call(store)`` sent again through a connection that drops briefly; a Redis error is one
    sentence naming the consumer (never the store's password)."""
    def run(store: HwmStore) -> Any:
        return answered(store, lambda: call(store), f"consumer {store.consumer}", action,
                        f"consumer {cfg.hwm_consumer}: {action} failed",
                        cfg.stream.hwm_commit_retry)

    return with_store(cfg, run)
