"""SQE's Kafka source for Spark: a Python data source that needs no JVM connector.

Registered as ``sqe-kafka``.  The driver side (:class:`KafkaStreamReader`)
plans micro-batches from the brokers' watermarks; ``read()`` runs on the
executors, one Spark task per Kafka partition per micro-batch, consumes its
offset range with confluent-kafka and yields ``pyarrow.RecordBatch``\\ es.

Offsets are JSON ``{"<partition>": <next offset>}``.  A range ends exactly at
its end offset: a task asks the broker for no more than what remains and stops
as soon as its position reaches the end, so it never waits out a consume
timeout, and offsets may have gaps (compaction, transaction markers).

With ``filterReplays`` the planner reads the high-water marks of this
consumer from Redis once per micro-batch and ships them with every input
partition; ``read()`` drops replays (:func:`sqe.source.replay.filter_replays`) before
they become Spark rows.  With ``emitTally`` each task that dropped replays
also yields one *tally row* (``_offset`` NULL, ``_replays_dropped`` = count)
so the runner can report the counter; :func:`data_rows` removes tally rows.

Example::

    >>> spark.dataSource.register(KafkaSource)                  # doctest: +SKIP
    >>> (spark.readStream.format("sqe-kafka")                   # doctest: +SKIP
    ...     .option("topic", "events").option("brokers", "localhost:9092").load())
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sqe.config.kafka_client import consumer_conf, error_text, new_consumer, topic_partitions
from sqe.config.redis_endpoint import RedisEndpoint
from sqe.errors import SourceError, TopologyError
from sqe.source.rows import ARROW_SCHEMA, FILTER_HEADER, SCHEMA, DeadLetters, Records, Tally, to_rows

__all__ = [
    "SOURCE_NAME",
    "SCHEMA",
    "ARROW_SCHEMA",
    "KafkaSource",
    "KafkaStreamReader",
    "RangePartition",
    "SourceConfig",
    "data_rows",
    "limit_offsets",
]

SOURCE_NAME = "sqe-kafka"

_ROWS_PER_ARROW_BATCH = 100_000
_CONSUME_TIMEOUT = 0.5


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = str(options.get(name.lower(), default)).strip().lower()
    if raw not in ("true", "false"):
        raise SourceError(f"sqe-kafka option {name} must be true or false, got {raw!r}")
    return raw == "true"


def _count(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceError(f"sqe-kafka option {name} must be an integer, got {raw!r}") from None
    if value < 1:
        raise SourceError(f"sqe-kafka option {name} must be at least 1, got {value}")
    return value


@dataclass(frozen=True)
class SourceConfig:
    """The validated options of one ``sqe-kafka`` source.

    Reader options (``.option(name, value)``): ``topic`` and ``brokers``
    (required); ``startingOffsets`` (``earliest``, ``latest`` or JSON
    ``{"0": 42}``); ``maxRecordsPerBatch``; ``readTimeoutSeconds``;
    ``filterReplays`` with ``hwm.url``, ``hwm.consumer`` and ``hwm.ttl`` (and the
    store's ``hwm.username``, ``hwm.password``, ``hwm.tls.caFile``,
    ``hwm.tls.certFile``, ``hwm.tls.keyFile``);
    ``emitTally``; ``chunks`` (the topic holds SQE chunks); ``filterValues``
    (a JSON list), ``matchUnfiltered`` and ``postFilter`` (an SQE expression as
    JSON); ``corruptChunkPolicy`` (``fail`` or ``deadletter``) with
    ``deadLetterTopic``; and ``kafka.<librdkafka key>`` passed to the consumer.
    """

    topic: str
    brokers: str
    starting: str = "earliest"
    max_records: int | None = None
    read_timeout: int = 120
    filter_replays: bool = False
    hwm_url: str | None = None
    hwm_consumer: str | None = None
    hwm_ttl: int = 172800
    emit_tally: bool = False
    kafka: dict[str, str] = field(default_factory=dict, repr=False)  # may hold SASL secrets
    chunks: bool = False
    filter_values: tuple[str, ...] = ()
    match_unfiltered: bool = False
    post_filter: str | None = None  # an SQE expression, as JSON
    corrupt_policy: Literal["fail", "deadletter"] = "fail"
    dead_letter_topic: str | None = None
    hwm_username: str | None = None
    hwm_password: str | None = field(default=None, repr=False)
    hwm_ca_file: str | None = None
    hwm_cert_file: str | None = None
    hwm_key_file: str | None = None

    def __post_init__(self) -> None:
        if self.corrupt_policy not in ("fail", "deadletter"):
            raise SourceError("sqe-kafka option corruptChunkPolicy must be fail or deadletter, "
                              f"got {self.corrupt_policy!r}")
        if self.corrupt_policy == "deadletter" and not self.dead_letter_topic:
            raise SourceError("sqe-kafka with corruptChunkPolicy=deadletter needs the option "
                              "deadLetterTopic")
        _ = self.post_filter_expression  # a bad post-filter fails here, not on an executor

    @property
    def hwm_endpoint(self) -> RedisEndpoint:
        """The HWM store with its credentials and TLS files."""
        return RedisEndpoint(str(self.hwm_url), self.hwm_username, self.hwm_password,
                             self.hwm_ca_file, self.hwm_cert_file, self.hwm_key_file)

    @property
    def filtering(self) -> bool:
        """Whether messages are post-filtered (by filterValues or postFilter)."""
        return bool(self.filter_values) or self.post_filter is not None

    @cached_property
    def post_filter_expression(self) -> Any:
        """The post-filter compiled to an Arrow expression, or ``None``."""
        if self.post_filter is None:
            return None
        from sqe.lang.expressions import ExpressionError, parse_expression
        from sqe.lang.post_filter import compile_filter
        from sqe.source.rows import RECORD_COLUMNS

        try:
            expr = parse_expression(json.loads(self.post_filter))
            return compile_filter(expr, RECORD_COLUMNS, "sqe-kafka option postFilter")
        except TopologyError as exc:
            raise SourceError(str(exc)) from None
        except (ValueError, ExpressionError) as exc:
            raise SourceError(f"sqe-kafka option postFilter: {exc}") from None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceConfig:
        """Validate reader options; a problem is a :class:`SourceError` naming the option."""
        opts = {str(k): str(v) for k, v in options.items()}
        lowered = {k.lower(): v for k, v in opts.items()}
        for required in ("topic", "brokers"):
            if not lowered.get(required, "").strip():
                raise SourceError(f"sqe-kafka needs the option {required}")
        starting = lowered.get("startingoffsets", "earliest").strip()
        if starting.lower() in ("earliest", "latest"):
            starting = starting.lower()
        else:
            _parse_offsets(starting, "startingOffsets")
        cfg = cls(
            topic=lowered["topic"].strip(),
            brokers=lowered["brokers"].strip(),
            starting=starting,
            max_records=_count(lowered, "maxRecordsPerBatch", None),
            read_timeout=_count(lowered, "readTimeoutSeconds", 120) or 120,
            filter_replays=_flag(lowered, "filterReplays", False),
            hwm_url=lowered.get("hwm.url"),
            hwm_consumer=lowered.get("hwm.consumer"),
            hwm_ttl=_count(lowered, "hwm.ttl", 172800) or 172800,
            emit_tally=_flag(lowered, "emitTally", False),
            kafka={k[len("kafka."):]: v for k, v in opts.items() if k.lower().startswith("kafka.")},
            chunks=_flag(lowered, "chunks", False),
            filter_values=_values(lowered.get("filtervalues")),
            match_unfiltered=_flag(lowered, "matchUnfiltered", False),
            post_filter=lowered.get("postfilter") or None,
            corrupt_policy=lowered.get("corruptchunkpolicy", "fail").strip().lower(),  # type: ignore[arg-type]
            dead_letter_topic=lowered.get("deadlettertopic") or None,
            **{name: lowered.get(option.lower()) or None for option, name in _HWM_OPTIONS.items()},
        )
        if cfg.filter_replays and not (cfg.hwm_url and cfg.hwm_consumer):
            raise SourceError("sqe-kafka with filterReplays=true needs the options hwm.url "
                              "(the Redis URL of the HWM store) and hwm.consumer")
        return cfg

    def to_options(self) -> dict[str, str]:
        """The reader options that rebuild this config (what the runner passes to Spark)."""
        out = {
            "topic": self.topic, "brokers": self.brokers, "startingOffsets": self.starting,
            "readTimeoutSeconds": str(self.read_timeout),
            "filterReplays": str(self.filter_replays).lower(), "hwm.ttl": str(self.hwm_ttl),
            "emitTally": str(self.emit_tally).lower(),
        }
        if self.max_records is not None:
            out["maxRecordsPerBatch"] = str(self.max_records)
        if self.hwm_url:
            out["hwm.url"] = self.hwm_url
        if self.hwm_consumer:
            out["hwm.consumer"] = self.hwm_consumer
        out.update({f"kafka.{k}": v for k, v in self.kafka.items()})
        out.update(chunks=str(self.chunks).lower(), filterValues=json.dumps(self.filter_values),
                   matchUnfiltered=str(self.match_unfiltered).lower(),
                   corruptChunkPolicy=self.corrupt_policy)
        if self.post_filter is not None:
            out["postFilter"] = self.post_filter
        if self.dead_letter_topic:
            out["deadLetterTopic"] = self.dead_letter_topic
        out.update({option: getattr(self, name) for option, name in _HWM_OPTIONS.items()
                    if getattr(self, name)})
        return out

    def consumer(self, role: str) -> Any:
        """A confluent-kafka consumer for this source (``role`` names it in the group id)."""
        conf = consumer_conf(self.brokers, f"sqe-{role}-{self.topic}", self.kafka,
                             quiet=role == "planner")
        return new_consumer(conf, f"Kafka source {self.topic} {role}")


#: Reader options of the HWM store's credentials and TLS files, by SourceConfig field.  Spark
#: redacts option keys matching spark.redaction.regex (password) in plans and the UI.
_HWM_OPTIONS = {"hwm.username": "hwm_username", "hwm.password": "hwm_password",
                "hwm.tls.caFile": "hwm_ca_file", "hwm.tls.certFile": "hwm_cert_file",
                "hwm.tls.keyFile": "hwm_key_file"}


def _values(raw: str | None) -> tuple[str, ...]:
    if raw is None or not raw.strip():
        return ()
    try:
        values = json.loads(raw)
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError("not a list of strings")
    except ValueError as exc:
        raise SourceError(f'sqe-kafka option filterValues must be a JSON list like ["eu"], '
                          f"got {raw!r} ({exc})") from None
    return tuple(values)


def _parse_offsets(text: str, what: str) -> dict[int, int]:
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        return {int(p): int(o) for p, o in raw.items()}
    except (ValueError, TypeError) as exc:
        raise SourceError(f"sqe-kafka option {what} must be earliest, latest or JSON like "
                          f'{{"0": 42}}, got {text!r} ({exc})') from None


def _offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(offsets.items())}


def limit_offsets(start: Mapping[int, int], latest: Mapping[int, int],
                  max_records: int | None) -> dict[int, int]:
    """End offsets that read at most ``max_records`` records in all, shared by backlog.

    Each partition gets a share of the limit proportional to its backlog
    (floored), and what flooring leaves goes to the largest backlogs, so the
    total is exactly ``min(max_records, total backlog)``.
    """
    backlog = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return dict(latest)
    share = {p: backlog[p] * max_records // total for p in backlog}
    left = max_records - sum(share.values())
    for p in sorted(backlog, key=lambda p: (-(backlog[p] - share[p]), p)):
        if left == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            left -= 1
    return {p: start.get(p, latest[p]) + share[p] for p in latest}


@dataclass
class RangePartition(InputPartition):
    """One Kafka partition's offset range of a micro-batch, and the HWMs to filter it with."""

    topic: str
    partition: int
    start: int
    end: int
    hwm: dict[tuple[int, int], int] | None = None

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.partition, self.start, self.end))


class _BrokersAway(Exception):
    """The brokers did not answer one planning attempt (the text says how); retried."""


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver; :meth:`read` runs on the executors."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._meta = None  # a consumer for metadata and watermarks, made on first use
        self._target: dict[int, int] | None = None  # AvailableNow's end

    def __getstate__(self) -> dict:
        # Executors get the config only: clients are made where they are used.
        return {"config": self.config, "_meta": None, "_target": None}

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
        deadline = time.monotonic() + cfg.read_timeout
        while True:
            try:
                return self._try_watermarks(max(1.0, min(30.0, deadline - time.monotonic())))
            except _BrokersAway as exc:
                if time.monotonic() >= deadline:
                    raise SourceError(
                        f"Kafka source {cfg.topic}: cannot reach the Kafka brokers {cfg.brokers} "
                        f"for {cfg.read_timeout} s (jw.sqe.spout.kafka.readTimeoutSeconds; last "
                        f"error: {exc}); the next batch was not started") from None
                time.sleep(1.0)

    def _try_watermarks(self, timeout: float) -> dict[int, tuple[int, int]]:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

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
            partitions = topic_partitions(client, cfg.topic, cfg.brokers, SourceError,
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

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts: earliest, latest or the given JSON."""
        marks = self._watermarks()
        if self.config.starting == "earliest":
            return _offsets_json({p: lo for p, (lo, _) in marks.items()})
        if self.config.starting == "latest":
            return _offsets_json({p: hi for p, (_, hi) in marks.items()})
        given = _parse_offsets(self.config.starting, "startingOffsets")
        return _offsets_json({p: given.get(p, lo) for p, (lo, _) in marks.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerBatch`` as Spark's row limit, else everything available."""
        if self.config.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run at the current high watermarks."""
        self._target = {p: hi for p, (_, hi) in self._watermarks().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: high watermarks, capped by the limit and target."""
        begin = {int(p): int(o) for p, o in start.items()}
        marks = self._watermarks()
        latest = {p: hi for p, (_, hi) in marks.items()}
        if self._target is not None:
            latest = {p: min(hi, self._target.get(p, begin.get(p, marks[p][0])))
                      for p, hi in latest.items()}
        # A partition new since the last batch starts at its earliest offset.
        first = {p: begin.get(p, marks[p][0]) for p in latest}
        latest = {p: max(latest[p], first[p]) for p in latest}
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return _offsets_json(limit_offsets(first, latest, rows))

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        """One input partition per Kafka partition with records in ``[start, end)``."""
        begin = {int(p): int(o) for p, o in start.items()}
        stop = {int(p): int(o) for p, o in end.items()}
        ranges = [(p, begin.get(p, 0), e) for p, e in sorted(stop.items()) if e > begin.get(p, 0)]
        hwm = self._load_hwm() if (ranges and self.config.filter_replays) else None
        return [RangePartition(self.config.topic, p, s, e, hwm) for p, s, e in ranges]

    def _load_hwm(self) -> dict[tuple[int, int], int]:
        import redis

        from state.hwm import HwmStore

        cfg = self.config
        endpoint = cfg.hwm_endpoint
        try:
            store = HwmStore.from_url(endpoint, str(cfg.hwm_consumer), cfg.hwm_ttl)
            try:
                return store.load().hwm
            finally:
                store.client.close()
        except redis.RedisError as exc:
            raise SourceError(f"cannot read the high-water marks of consumer {cfg.hwm_consumer}: "
                              f"{endpoint.describe_error(exc)}") from None

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """Close the planner's consumer."""
        if self._meta is not None:
            self._meta.close()
            self._meta = None

    # -- executor side -----------------------------------------------------------------
    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        """Consume ``[start, end)`` of one partition and yield Arrow record batches."""
        yield from read_range(self.config, partition)


def read_range(cfg: SourceConfig, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition as Arrow batches (:func:`sqe.source.rows.to_rows`:
    replays dropped, chunks skipped or decoded, messages post-filtered, as configured)."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = cfg.consumer("reader")
    dead = DeadLetters(cfg) if cfg.corrupt_policy == "deadletter" else None
    headers = cfg.filtering and not cfg.chunks  # plain records carry the filter value there
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        hwm = dict(part.hwm) if part.hwm is not None else None
        tally = Tally()
        position = part.start
        deadline = time.monotonic() + cfg.read_timeout
        rec = Records(filter_values=[] if headers else None)
        while position < part.end:
            want = min(part.end - position, 10_000)
            messages = consumer.consume(num_messages=want, timeout=_CONSUME_TIMEOUT)
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise SourceError(
                        f"reading {part.topic}/{part.partition} at offset {position} "
                        f"(range {part.start}..{part.end}): {error_text(err)}")
                offset = msg.offset()
                if offset >= part.end:
                    position = part.end
                    break
                rec.keys.append(msg.key())
                rec.values.append(msg.value())
                rec.offsets.append(offset)
                rec.stamps.append(msg.timestamp()[1])
                if rec.filter_values is not None:
                    rec.filter_values.append(_filter_header(msg.headers()))
                position = offset + 1
            if position < part.end:
                # Offsets may have gaps (transaction markers, compaction): the client's
                # position moves past them without delivering a record.
                pos = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
                position = max(position, pos)
            if messages:
                deadline = time.monotonic() + cfg.read_timeout
            elif position < part.end and time.monotonic() > deadline:
                raise SourceError(
                    f"reading {part.topic}/{part.partition}: offsets {position}..{part.end} "
                    f"were not delivered within {cfg.read_timeout} s "
                    f"(brokers {cfg.brokers}); nothing of this batch was committed")
            if len(rec) >= _ROWS_PER_ARROW_BATCH or (position >= part.end and len(rec)):
                batch, hwm, counts = to_rows(cfg, part, rec, hwm, dead)
                tally.add(counts)
                rec = Records(filter_values=[] if headers else None)
                if batch.num_rows:
                    yield batch
        if dead is not None:
            dead.finish()
        if cfg.emit_tally and tally:
            yield tally.row(part.topic, part.partition)
    finally:
        consumer.close()


def _filter_header(headers: list[tuple[str, bytes]] | None) -> bytes | None:
    """The value of the ``sqe-filter-value`` header (the last one wins), or ``None``."""
    found = None
    for name, value in headers or ():
        if name == FILTER_HEADER:
            found = value
    return found


def data_rows(df: Any) -> Any:
    """``df`` without tally rows (rows of records have an ``_offset``)."""
    return df.where(df["_offset"].isNotNull())


class KafkaSource(DataSource):
    """The ``sqe-kafka`` data source; see :class:`SourceConfig` for its options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(SourceConfig.from_options(self.options))
