"""SQE's Kafka source for Spark: a Python data source that needs no JVM connector.

Registered as ``sqe-kafka``.  The driver side (:class:`KafkaStreamReader`)
plans micro-batches from the brokers' watermarks; ``read()`` runs on the
executors, one Spark task per Kafka partition per micro-batch, consumes its
offset range with confluent-kafka and yields ``pyarrow.RecordBatch``\\ es.

Offsets are JSON ``{"<partition>": <next offset>}``.  A range ends exactly at
its end offset: a task asks the broker for no more than what remains and stops
as soon as its position reaches the end, so it never waits out a consume
timeout, and offsets may have gaps (compaction, transaction markers).

With ``filterReplays`` each task reads the high-water marks of the (pid, partition) pairs its
records name, when it first meets them (:class:`sqe.source.marks.TaskMarks`: what a batch
touches, not what the store holds), and drops replays (:func:`sqe.source.replay.filter_replays`)
before they become Spark rows; with ``reportRead`` it reports what it read to the store
(:mod:`sqe.source.read_report`).  With ``emitTally`` each task that dropped replays also yields
one *tally row* (``_offset`` NULL, ``_replays_dropped`` = count) for the runner's counters
(:func:`sqe.wire.columns.data_rows` removes them).  Its options are
:mod:`sqe.source.kafka.config`'s.

Example::

    >>> spark.dataSource.register(KafkaSource)                  # doctest: +SKIP
    >>> (spark.readStream.format("sqe-kafka")                   # doctest: +SKIP
    ...     .option("topic", "events").option("brokers", "localhost:9092").load())
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from sqe.clients.kafka import error_text, topic_partitions
from sqe.clients.producers import make_ahead
from sqe.config.worker_task import begin_task
from sqe.errors import SourceError
from sqe.source.admission import (
    Position,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from sqe.source.dead_letters import DeadLetters
from sqe.source.hang_up import quiet_hang_up
from sqe.source.json_fields import schema_with, with_fields
from sqe.source.kafka.config import (
    RangeGroup,
    RangePartition,
    SourceConfig,
    by_partition,
    parse_offsets,
)
from sqe.source.kafka.offsets import (
    limit_offsets,
    moved_partitions,
    offsets_json,
    plan_ranges,
    undelivered,
)
from sqe.source.kafka.reader_pool import READERS
from sqe.source.kafka.rows import Records, to_rows
from sqe.source.marks import TaskMarks
from sqe.source.read_report import RangeRead
from sqe.source.record_headers import schema_with_headers, with_headers
from sqe.source.values import schema_with_value, with_value
from sqe.wire.collector import paused
from sqe.wire.columns import SCHEMA, Tally
from sqe.wire.headers import FILTER_HEADER

__all__ = ["SOURCE_NAME", "KafkaBatchReader", "KafkaSource", "KafkaStreamReader", "read_range"]

SOURCE_NAME = "sqe-kafka"

#: Records turned into one Arrow batch at a time: what a task holds as Python objects and Arrow
#: copies at once (20,000 of ~300 bytes peak at 60 MB, 100,000 at 180 MB, and read no faster).
_ROWS_PER_ARROW_BATCH = 20_000
_CONSUME_TIMEOUT = 0.5


class _BrokersAway(Exception):
    """The brokers did not answer one planning attempt (the text says how); retried."""


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver; :meth:`read` runs on the executors."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._meta = None  # a consumer for metadata and watermarks, made on first use
        self._target: dict[int, int] | None = None  # AvailableNow's end
        self._position = Position()  # where the next batch starts (pyspark 4.0 and 4.1)

    def __getstate__(self) -> dict:  # executors get the config: clients are made where used
        return {"config": self.config, "_meta": None, "_target": None, "_position": Position()}

    # -- driver side -------------------------------------------------------------------
    def _client(self) -> Any:
        if self._meta is None:
            self._meta = self.config.consumer("planner")
        return self._meta

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        """Low and high watermark per partition.  Brokers that do not answer (down or
        restarting: no metadata, no leader, no offsets) are asked again every second for up
        to ``readTimeoutSeconds`` (librdkafka reconnects by itself), then the batch fails."""
        cfg = self.config
        timeout = cfg.stream.read_timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._try_watermarks(max(1.0, min(30.0, deadline - time.monotonic())))
            except _BrokersAway as exc:
                if time.monotonic() >= deadline:
                    raise SourceError(
                        f"Kafka source {cfg.topic}: cannot reach the Kafka brokers "
                        f"{cfg.stream.bootstrap} for {timeout} s "
                        "(jw.sqe.spout.kafka.readTimeoutSeconds; last "
                        f"error: {exc}); the next batch was not started") from None
                time.sleep(1.0)

    def _try_watermarks(self, timeout: float) -> dict[int, tuple[int, int]]:
        cfg, client = self.config, self._client()
        try:
            meta = client.list_topics(cfg.topic, timeout=timeout).topics.get(cfg.topic)
        except KafkaException as exc:
            raise _BrokersAway(error_text(exc)) from None
        leaderless = (KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                      KafkaError.BROKER_NOT_AVAILABLE, KafkaError._TRANSPORT)
        if meta is not None and meta.error is not None and meta.error.code() in leaderless:
            raise _BrokersAway(error_text(meta.error))
        if meta is None or meta.error is not None or not meta.partitions:  # one sentence why
            partitions = topic_partitions(client, cfg.topic, cfg.stream.bootstrap, SourceError,
                                          "Kafka source")
        else:
            partitions = sorted(meta.partitions)
        marks = {}
        for p in partitions:
            try:
                marks[p] = client.get_watermark_offsets(TopicPartition(cfg.topic, p),
                                                        timeout=timeout)
            except KafkaException as exc:
                raise _BrokersAway(f"the offsets of {cfg.topic}/{p}: {error_text(exc)}") from None
        return marks

    def watermarks_now(self, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
        """Low and high watermark per partition, asked once (for tools: ``sqe status``, the
        run's backlog); brokers that do not answer in ``timeout`` are a :class:`SourceError`."""
        try:
            return self._try_watermarks(timeout)
        except _BrokersAway as exc:
            raise SourceError(f"Kafka source {self.config.topic}: cannot reach the Kafka "
                              f"brokers {self.config.stream.bootstrap}: {exc}") from None

    def starting(self, marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
        """Where a query without a checkpoint starts, given the watermarks: earliest, latest
        or the ``startingOffsets`` JSON."""
        starting = self.config.stream.starting_offsets
        if starting == "earliest":
            return {p: lo for p, (lo, _) in marks.items()}
        if starting == "latest":
            return {p: hi for p, (_, hi) in marks.items()}
        given = parse_offsets(starting)
        return {p: given.get(p, lo) for p, (lo, _) in marks.items()}

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts: earliest, latest or the given JSON."""
        return offsets_json(self.starting(self._watermarks()), self.config.offsets_topic)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerBatch`` as Spark's row limit, else everything available."""
        rows = self.config.stream.max_records
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run at the current high watermarks."""
        self._target = {p: hi for p, (_, hi) in self._watermarks().items()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch: high watermarks, capped by the limit and target
        (PySpark 4.0 and 4.1 give no ``start``, no ``limit``: :mod:`sqe.source.admission`)."""
        marks = self._watermarks()
        if start is None:
            start, opening = self._position.ask()
            if start is None:  # no batch planned yet (Spark asks before initialOffset())
                start = offsets_json(self.starting(marks), self.config.offsets_topic)
            capped = self.config.cap_first or not opening
            limit = self.getDefaultReadLimit() if capped else ReadAllAvailable()
        begin = by_partition(start)
        if moved := moved_partitions(self.config.topic, begin, marks):
            raise SourceError(moved)
        latest = {p: hi for p, (_, hi) in marks.items()}
        if self._target is not None:
            latest = {p: min(hi, self._target.get(p, begin.get(p, marks[p][0])))
                      for p, hi in latest.items()}
        # A partition new since the last batch (the topic gained partitions) starts at its
        # earliest offset, as with Spark's own Kafka source.
        first = {p: begin.get(p, marks[p][0]) for p in latest}
        latest = {p: max(latest[p], first[p]) for p in latest}
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_json(limit_offsets(first, latest, rows), self.config.offsets_topic)

    def partitions(self, start: dict, end: dict) -> list[RangeGroup]:
        """The ranges ``[start, end)`` of the Kafka partitions with records, as few input
        partitions (tasks) as hold ``minRecordsPerTask`` records each."""
        self._position.seen(end)
        return plan_ranges(self.config, start, end)

    def commit(self, end: dict) -> None:  # offsets live in Spark's checkpoint, not in Kafka
        """Nothing to do."""

    def stop(self) -> None:
        """Close the planner's consumer."""
        if self._meta is not None:
            self._meta.close()
            self._meta = None

    # -- executor side -----------------------------------------------------------------
    def read(self, partition: RangeGroup) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        """Consume each range of the group and yield Arrow record batches."""
        for part in partition.ranges:
            yield from read_range(self.config, part)


class KafkaBatchReader(DataSourceReader):
    """A batch read (``spark.read``) of the offsets between ``startingOffsets`` and
    ``endingOffsets`` (both JSON), read as a micro-batch of them is: one way to read a batch
    again, e.g. when its one pass failed and the per-batch way must find the record."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> list[RangeGroup]:
        cfg = self.config
        try:
            start = parse_offsets(cfg.stream.starting_offsets)
        except (ValueError, AttributeError):
            raise SourceError(f"sqe-kafka {cfg.topic}: a batch read needs startingOffsets as "
                              f'JSON offsets such as {{"0": 42}}, got '
                              f"{cfg.stream.starting_offsets!r}") from None
        if cfg.ending is None:
            raise SourceError(f"sqe-kafka {cfg.topic}: a batch read needs the option "
                              "endingOffsets (where it ends)")
        return plan_ranges(cfg, start, parse_offsets(cfg.ending))

    def read(self, partition: RangeGroup) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        """Consume each range of the group and yield Arrow record batches."""
        for part in partition.ranges:
            yield from read_range(self.config, part)


def read_range(cfg: SourceConfig, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition as Arrow batches (:func:`sqe.source.kafka.rows.to_rows`:
    replays dropped, chunks skipped or decoded, messages post-filtered, as configured), with
    the JSON fields ``jsonFields`` asks for (:func:`~sqe.source.json_fields.with_fields`)."""
    begin_task()
    make_ahead(cfg.producers_ahead)  # the stream's states' producers (sqe.clients.producers)
    consumer = READERS.take(cfg)
    stream = cfg.stream
    reported = RangeRead.begin(cfg, part)  # with filterReplays only
    marks = reported.marks() if reported is not None else (
        TaskMarks.from_store(cfg) if stream.filter_replays else None)
    policies = (stream.corrupt_policy, stream.bad_record_policy)
    dead = DeadLetters(stream) if "deadletter" in policies else None
    headers = stream.post_filtering and not stream.chunks  # plain records carry the filter value
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        tally = Tally()
        position = part.start
        deadline = time.monotonic() + stream.read_timeout
        rec = _records(cfg, headers)
        while position < part.end:
            want = min(part.end - position, 10_000)
            messages = consumer.consume(num_messages=want, timeout=_CONSUME_TIMEOUT)
            if messages:
                position = _take(messages, rec, part, position)
            if position < part.end:
                # Offsets may have gaps (transaction markers, compaction): the client's
                # position moves past them without delivering a record.
                pos = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
                position = max(position, pos)
            if messages:
                deadline = time.monotonic() + stream.read_timeout
            elif position < part.end and time.monotonic() > deadline:
                raise SourceError(undelivered(consumer, part, position, stream))
            if len(rec) >= _ROWS_PER_ARROW_BATCH or (position >= part.end and len(rec)):
                batch, counts = to_rows(cfg, part, rec, marks, dead)
                tally.add(counts)
                rec = _records(cfg, headers)
                if batch.num_rows:
                    if reported is not None:
                        reported.saw(batch)
                    yield with_fields(batch, cfg.json_fields)  # (its value decoded by to_rows)
        if dead is not None:
            dead.finish()
        if reported is not None and marks is not None:
            reported.write(marks, tally)
        if cfg.emit_tally and tally:
            tally_row = with_headers(tally.row(part.topic, part.partition),
                                     stream.include_headers)
            yield with_fields(with_value(tally_row, cfg.value_format), cfg.json_fields)
        READERS.give_back(cfg, consumer)
        consumer = None
    finally:
        if consumer is not None:  # the task failed or was stopped: its state is unknown
            consumer.close()


def _records(cfg: SourceConfig, filter_values: bool) -> Records:
    """A task's next empty :class:`Records`: with the filter values' header when it filters by
    them, and every header with ``includeHeaders``."""
    return Records(filter_values=[] if filter_values else None,
                   headers=[] if cfg.stream.include_headers else None)


def _take(messages: list[Any], rec: Records, part: RangePartition, position: int) -> int:
    """Append the records of one ``consume`` call that lie in the range to ``rec``; the
    position after them.  Column by column, one comprehension each (no per-record method
    dispatch of a loop body), with the garbage collector paused: the messages are freed by
    reference counting, and a collection would only walk them."""
    with paused():
        if any([m.error() is not None for m in messages]):
            messages = _without_events(messages, part, position)
        if messages and not _in_range(messages[0], part, position):
            # a consumer reused from an earlier task delivers only its new assignment; this
            # holds it to that, whatever the client keeps
            messages = [m for m in messages if _in_range(m, part, position)]
        offsets = [m.offset() for m in messages]
        if offsets and offsets[-1] >= part.end:  # offsets ascend: cut at the range's end
            messages = messages[:bisect_left(offsets, part.end)]
            offsets = offsets[:len(messages)]
            position = part.end
        elif offsets:
            position = offsets[-1] + 1
        rec.keys += [m.key() for m in messages]
        rec.values += [m.value() for m in messages]
        rec.offsets += offsets
        rec.stamps += [m.timestamp()[1] for m in messages]
        if rec.filter_values is not None:
            rec.filter_values += [_filter_header(m.headers()) for m in messages]
        if rec.headers is not None:
            rec.headers += [m.headers() for m in messages]
    return position


def _in_range(message: Any, part: RangePartition, position: int) -> bool:
    return (message.partition() == part.partition and message.topic() == part.topic
            and message.offset() >= position)


def _without_events(messages: list[Any], part: RangePartition, position: int) -> list[Any]:
    """``messages`` without partition-EOF events; any other error fails the batch."""
    for m in messages:
        err = m.error()
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            raise SourceError(f"reading {part.topic}/{part.partition} at offset {position} "
                              f"(range {part.start}..{part.end}): {error_text(err)}")
    return [m for m in messages if m.error() is None]


def _filter_header(headers: list[tuple[str, bytes]] | None) -> bytes | None:
    """The value of the ``sqe-filter-value`` header (the last one wins), or ``None``."""
    found = None
    for name, value in headers or ():
        if name == FILTER_HEADER:
            found = value
    return found


class KafkaSource(DataSource):
    """The ``sqe-kafka`` data source; its options are :class:`~sqe.source.kafka.config.SourceConfig`'s."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        cfg = SourceConfig.from_options(self.options)
        schema = schema_with_headers(SCHEMA, cfg.stream.include_headers)
        return schema_with(schema_with_value(schema, cfg.value_format), cfg.json_fields)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        quiet_hang_up()  # in Spark's planning process: a stopped query prints no traceback
        return KafkaStreamReader(SourceConfig.from_options(self.options))

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(SourceConfig.from_options(self.options))
