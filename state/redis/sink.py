"""The Redis state: a query's rows written as Redis strings or hashes.

An aggregating query's Redis state merges instead (:mod:`state.redis.aggregates`),
the variant :meth:`RedisSink.create` picks.

SQE's options ``jw.sqe.state.redis.*`` decide the command per row:

* ``datatype: HASH``: ``HSET <keyname fields joined by the delimiter>
  <fieldname fields joined> <value>``;
* ``datatype: STRING``: ``SET <keyname fields joined> <value>``;

where the value is the one selected field that is neither a key nor a hash
field (a JSON object of them when there are several).  ``expireintervalsec``
> 0 adds ``EXPIRE`` on every written key.  Keys, fields and values are built
with Spark built-ins; each Spark task sends its rows in pipelined chunks.

Exactly once: when the state lives in the same Redis
server and database as the consumer's HWM store, the rows are *staged*
(:func:`stage_redis`, :class:`RedisSink`): the executors write them into one hash of the HWM
store, ``sqe:{<consumer>}:stage:<batch>:<writer>:<n>``, field ``<key bytes>:<key><hash
field>``, and the HWM commit script applies every staged row, the new HWMs and the batch id
in one atomic step (:meth:`sqe.ledger.hwm.HwmStore.commit`).  A crash before that step leaves
only a stage, of that run's own (:mod:`sqe.ledger.stages`), which the commit of its batch by
the next run deletes (or which expires after a day); a writer refused as stale deletes its
stages (:meth:`sqe.ledger.hwm.HwmStore.drop_stages`).  A
state on another server is written directly before the commit; ``SET`` and ``HSET`` of the same
data are idempotent, so a re-run batch leaves the same state there too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.errors import StateError
from sqe.ledger.hwm import HwmStore, Stage
from sqe.ledger.retry import Failed, asked
from sqe.wire.arrays import repeated
from sqe.wire.columns import field_column
from state.redis.aggregates import AggregateSink
from state.redis.layout import RedisLayout, ack_key, joined, replicated
from state.redis.tasks import STAGE_TTL_SECONDS, stage_task, writer_task
from state.sink import Batch, RowTask, Sink, SinkTarget, Staged, task_counts

__all__ = ["RedisSink", "RedisStateConfig", "STAGE_TTL_SECONDS", "stage_all", "stage_redis",
           "staged_rows", "write_redis"]



@dataclass(frozen=True)
class RedisStateConfig(RedisLayout):
    """Where and how one query writes to Redis: the layout, and the value's fields."""

    value_fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, target: SinkTarget) -> RedisStateConfig:
        """The config of a query's Redis state (its options checked by :meth:`RedisSink.problems`)."""
        s = target.settings.redis
        values = tuple(f for f in target.fields if f not in s.key_fields + s.hash_fields)
        return cls(target.name, s.endpoint, s.datatype, s.key_fields, s.hash_fields,
                   s.delimiter, s.expire_seconds, values)


class RedisSink(Sink):
    """A Redis state: staged for the HWM commit when it shares the HWM store's database,
    else written directly (see the module docstring)."""

    state_name = "REDIS"

    def where(self) -> str:
        """The Redis server and database (without a password)."""
        return f"Redis at {self.config.endpoint.display}"

    def __init__(self, target: SinkTarget) -> None:
        super().__init__(target)
        self.config = RedisStateConfig.of(target)
        self._stage: Stage | None = None  # where this batch's rows are staged, if they are
        self._store: RedisEndpoint | None = None  # the HWM store that holds the stage
        self._pass_staged = False  # the one-pass plan stages the rows (pass_columns)

    @classmethod
    def create(cls, target: SinkTarget) -> Sink:
        return AggregateSink(target) if target.aggregates else cls(target)

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        s, where = target.settings.redis, target.where
        try:
            _ = s.endpoint
        except ValueError as exc:
            return [f"{where}: {exc}"]
        problems = []
        clashing = s.server_keys_given_beside_url() if s.url is not None else []
        if clashing:
            problems.append(f"{where}: jw.sqe.state.redis.url ({s.origin(type(s).url)}) names "
                            f"the server, so {', '.join(clashing)} would be ignored; keep one "
                            "of the two")
        if target.aggregates:
            return problems + AggregateSink.problems(target)
        for key, names in (("jw.sqe.state.redis.keyname.fields", s.key_fields),
                           ("jw.sqe.state.redis.fieldname.fields", s.hash_fields)):
            missing = [f for f in names if f not in target.fields]
            if missing:
                problems.append(f"{where}: {key} names {', '.join(missing)}, which "
                                f"insertInto.fields does not have ({', '.join(target.fields)})")
        if not s.key_fields:
            problems.append(f"{where}: jw.sqe.state.redis.keyname.fields names no field, so "
                            "there is no Redis key to write")
        if s.datatype == "HASH" and not s.hash_fields:
            problems.append(f"{where}: datatype HASH needs jw.sqe.state.redis.fieldname.fields")
        if not [f for f in target.fields if f not in s.key_fields + s.hash_fields]:
            problems.append(f"{where}: every selected field is a key or hash field; select one "
                            "more field to be the value")
        return problems

    def open(self, batch: Batch) -> None:
        super().open(batch)
        store = batch.store
        self._stage = self._store = None
        try:
            if store is not None and store.endpoint is not None \
                    and store.same_database(self.config.endpoint):
                self._stage = Stage(batch.stage_key(), self.config.datatype,
                                    self.config.expire_seconds)
                self._store = store.endpoint
                key = self._stage.key  # what a failed attempt staged goes: sent again
                asked(store, lambda: store.stages.open(key, batch.batch_id),  # sent again
                      f"batch {batch.batch_id} of {batch.consumer}",         # while away
                      f"the clearing of {self.config.name}'s stage")
        except Failed as exc:
            raise StateError(f"Redis state {self.config.name}: "
                             f"{self.config.endpoint.describe_error(exc.error)}; the batch "
                             "fails and is written when it is retried") from None

    def write(self, frame: DataFrame) -> int:
        if self._stage is None or self._store is None:
            return write_redis(frame, self.config, *self._direct_wait())
        return stage_redis(frame, self.config, self._store, self._stage.key, *self._stage_wait())

    def write_empty(self, frame: DataFrame) -> int:
        return 0  # nothing to write or stage; commit stages nothing new

    def staged(self, frame: DataFrame) -> Staged | None:
        """The rows to stage, when this batch stages them (:func:`stage_all` stages every
        such state's rows in one job)."""
        if self._stage is None or self._store is None:
            return None
        return Staged(self.config.name, self._stage.key,
                      staged_rows(frame, self.config, self._stage.key), self._store, stage_all,
                      *self._stage_wait())

    def pass_columns(self, frame: DataFrame, hwm: HwmStore | None) -> list[Column]:
        """The staged form of the rows (``_rf``, ``_rv``) when the state shares the HWM store's
        database (its task stages them there), else the command's ``_rk``/``_rf``/``_rv``."""
        self._pass_staged = hwm is not None and hwm.same_database(self.config.endpoint)
        if self._pass_staged:
            assert hwm is not None
            self._store = hwm.endpoint
            return list(_staged_columns(frame, self.config))
        key, field, value = _command_columns(frame, self.config)
        return [key.alias("_rk"), field.alias("_rf"), value.alias("_rv")]

    def pass_planned(self, columns: Sequence[str]) -> None:
        """Whether the rows were planned staged (``_rf``, ``_rv``) or as commands (with
        ``_rk``)."""
        self._pass_staged = "_rk" not in columns

    def pass_context(self) -> dict[str, Any]:
        """The open batch's stage key, when it stages the rows, and what its task waits for."""
        staging = self._stage is not None and self._store is not None
        if staging != self._pass_staged:
            raise StateError(f"Redis state {self.config.name}: whether it shares the HWM "
                             "store's database changed since the stream was planned; the "
                             "batch fails and the run plans it again when restarted")
        if self._stage is None:
            replicas, timeout, ack = self._direct_wait()
            return {"replicas": replicas, "timeout": timeout, "ack": ack}
        replicas, timeout = self._stage_wait()
        return {"stage": self._stage.key, "replicas": replicas, "timeout": timeout}

    def pass_task(self, context: Mapping[str, Any]) -> RowTask:
        """Stage the batch's rows under its stage key in the HWM store, or write them
        directly, as :meth:`pass_columns` planned (``context``: :meth:`pass_context`'s)."""
        replicas, timeout = int(context["replicas"]), float(context["timeout"])
        if "stage" not in context:
            c = self.config
            return writer_task(c.name, c.endpoint, c.datatype, c.expire_seconds,
                               replicas, timeout, str(context["ack"]))
        assert self._store is not None, "a staging Redis state planned without its store"
        stage = str(context["stage"])
        task = stage_task(f"Redis state {self.config.name}", self._store, replicas, timeout)

        def staged(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for out in task(b.append_column("_stage", repeated(stage, b.num_rows))
                            for b in batches):
                yield out.select(["written"])
        return staged

    def _stage_wait(self) -> tuple[int, float]:
        """What a task staging the rows waits for: the HWM store's replicas and timeout."""
        store = self.batch.store
        return (store.replicas, store.replica_timeout) if store is not None else (0, 10.0)

    def _direct_wait(self) -> tuple[int, float, str]:
        """What a task writing the rows directly waits for: the state's replicas, their
        timeout, and the key it writes for ``WAIT``."""
        s = self.target.settings.redis
        return s.replicas, s.replica_timeout, ack_key(self.batch.consumer, self.config.name)

    def commit(self) -> None:
        """Hand the staged rows to the HWM commit, or wait for the replicas of the server the
        rows were written to directly."""
        if self._stage is not None:
            self.batch.stages.append(self._stage)
            return
        s = self.target.settings.redis
        replicated(self.config, s.replicas, s.replica_timeout, self.batch.consumer,
                   self.batch.batch_id)


def _value(df: DataFrame, fields: tuple[str, ...]) -> Column:
    if len(fields) == 1:
        col = field_column(fields[0])
        return col if df.schema[fields[0]].dataType.typeName() == "binary" else col.cast("string")
    return F.to_json(F.struct(*[field_column(f) for f in fields]))


def _command_columns(df: DataFrame, cfg: RedisStateConfig) -> tuple[Column, Column, Column]:
    """The key, the hash field (NULL for a STRING) and the value of each row of ``df``."""
    field = (joined(cfg.hash_fields, cfg.delimiter) if cfg.datatype == "HASH"
             else F.lit(None).cast("string"))
    return joined(cfg.key_fields, cfg.delimiter), field, _value(df, cfg.value_fields)


def prepare_redis(df: DataFrame, cfg: RedisStateConfig) -> DataFrame:
    """Columns ``_rk`` (key), ``_rf`` (hash field or NULL) and ``_rv`` (value) per row."""
    key, field, value = _command_columns(df, cfg)
    return df.select(key.alias("_rk"), field.alias("_rf"), value.alias("_rv"))


def _staged_columns(df: DataFrame, cfg: RedisStateConfig) -> tuple[Column, Column]:
    """``_rf`` and ``_rv`` of :func:`staged_rows`, over ``df``'s fields."""
    key, field, value = _command_columns(df, cfg)
    return (F.concat(F.octet_length(key).cast("string"), F.lit(":"), key,
                     F.coalesce(field, F.lit(""))).alias("_rf"),
            value.cast("binary").alias("_rv"))


def _send(rows: DataFrame, task: Any) -> int:
    return task_counts(rows.mapInArrow(task, "written long")).get(None, {}).get("written", 0)


def write_redis(df: DataFrame, cfg: RedisStateConfig, replicas: int = 0,
                timeout_s: float = 10.0, ack: str = "") -> int:
    """Write ``df`` to Redis from the executors; returns the number of rows written (each task
    held by ``replicas`` replicas, :func:`~state.redis.tasks.writer_task`)."""
    return _send(prepare_redis(df, cfg),
                 writer_task(cfg.name, cfg.endpoint, cfg.datatype, cfg.expire_seconds,
                             replicas, timeout_s, ack))


def staged_rows(df: DataFrame, cfg: RedisStateConfig, stage_key: str) -> DataFrame:
    """``df``'s rows as the HWM store stages them: ``_stage`` (the hash), ``_rf`` (the key's
    length, ``:``, the key and the hash field) and ``_rv`` (the value's bytes)."""
    return df.select(F.lit(stage_key).alias("_stage"), *_staged_columns(df, cfg))


def stage_all(staged: Sequence[Staged]) -> dict[str, int]:
    """Stage the :func:`staged_rows` of several Redis states in their HWM store (one
    store: :func:`state.sink.stage_together` groups them) in one Spark job; returns the
    rows staged per stage key.

    A batch of load.yaml stages two states: one job instead of one each saves a Spark job's
    fixed cost (about 0.15 s) a batch.  The commit script applies them (see the module
    docstring); nothing reaches the states' keys before it does.
    """
    names = " and ".join(f"Redis state {item.name}" for item in staged)
    rows = reduce(DataFrame.union, [item.rows for item in staged])
    replicas = max(item.replicas for item in staged)  # one store: one consumer's setting
    timeout_s = max(item.replica_timeout for item in staged)
    sent = rows.mapInArrow(stage_task(names, staged[0].store, replicas, timeout_s),
                           "stage string, written long")
    return {str(stage): c["written"] for stage, c in task_counts(sent, "stage").items()}


def stage_redis(df: DataFrame, cfg: RedisStateConfig, store: RedisEndpoint, stage_key: str,
                replicas: int = 0, replica_timeout: float = 10.0) -> int:
    """Stage ``df``'s rows in hash ``stage_key`` of the HWM store; returns the rows staged
    (:func:`stage_all` of one state; ``replicas`` of the store must hold them)."""
    rows = staged_rows(df, cfg, stage_key)
    return stage_all([Staged(cfg.name, stage_key, rows, store, stage_all, replicas,
                             replica_timeout)]).get(stage_key, 0)
