"""Aggregates merged into Redis exactly once per batch id: SQE's Trident map states on Spark.

An aggregating query (``Sum``, ``Max``, ``CreateHll``/``CreateHllp``, grouped
by its plain fields within the micro-batch) keeps **one Redis entry per group
and aggregate**, laid out as SQE does (``d`` is ``jw.sqe.state.redis.delimiter``):

* ``datatype: HASH``: key ``<objectName>d<keyname fields joined by d>``, field
  ``<fieldname fields joined by d>d<aggregate field>``;
* ``datatype: STRING``: key ``<objectName>d<keyname fields>d<aggregate field>``.

``keyname.fields`` defaults to the plain fields that are not ``fieldname.fields``;
a plain field in neither is an error (its groups would share an entry).

Stored values follow ``stateType`` in SQE's JSON (:mod:`state.redis.aggregate_layout`):
``TRANSACTIONAL`` does not apply a merge for the batch id already stored (a
re-run batch changes nothing); ``OPAQUE`` starts a merge for the stored batch id
again from the value before it, so a re-run batch with other contents replaces
its own earlier contribution instead of adding twice; ``NON_TRANSACTIONAL``
merges every time.

Sum adds and Max keeps the larger: both are merged by one Lua script on the
server, many entries per call, calls pipelined, from the executors.  HLL
sketches (Spark's ``hll_sketch_agg``, DataSketches format) cannot be merged
in Lua: the executors read the stored sketches, Spark unions them with
``hll_union``, and the same script writes the result only if the entry is
still what was read (compare-and-set), so nothing is lost to a concurrent
writer.  Lua numbers are doubles: an integer sum beyond 2**53 fails the batch
instead of losing precision.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import redis
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.clients.redis_clients import kept_client
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.config.worker_task import begin_task
from sqe.errors import StateError
from sqe.ledger.commits import Commit
from sqe.wire.arrays import counts_batch, strings
from sqe.wire.columns import field_column
from state.redis.aggregate_layout import MERGE_SCRIPT, StateMode, encoded, stored_parts
from state.redis.layout import RedisLayout, joined, record_key, replicated
from state.sink import Sink, SinkTarget, task_counts

__all__ = ["AggregateSink", "AggregateStateConfig", "write_aggregates"]

_ENTRIES_PER_CALL = 500
_MODES = ("TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL")


@dataclass(frozen=True)
class AggregateStateConfig(RedisLayout):
    """Where and how one aggregating query merges into Redis: the layout, the aggregates and
    the mode."""

    aggregates: tuple[tuple[str, str], ...] = ()  # (output field, SQE function)
    mode: StateMode = "NON_TRANSACTIONAL"

    @classmethod
    def of(cls, target: SinkTarget) -> AggregateStateConfig:
        """The config of an aggregating query (its layout checked by
        :meth:`AggregateSink.problems`); ``keyname.fields`` defaults to the plain fields
        that are not hash fields."""
        s = target.settings.redis
        plain = [f for f in target.fields if f not in target.aggregates]
        keys = s.key_fields or tuple(f for f in plain if f not in s.hash_fields)
        mode = cast(StateMode, (target.state_type or "NON_TRANSACTIONAL").upper())
        return cls(target.name, s.endpoint, s.datatype, keys, s.hash_fields, s.delimiter,
                   s.expire_seconds, tuple(target.aggregates.items()), mode)


class AggregateSink(Sink):
    """A Redis state of an aggregating query: entries merged with the batch id."""

    state_name = "REDIS"
    merges = True  # write counts the entries it merged, not rows

    def where(self) -> str:
        """The Redis server and database (without a password)."""
        return f"Redis at {self.config.endpoint.display}"

    def __init__(self, target: SinkTarget) -> None:
        super().__init__(target)
        self.config = AggregateStateConfig.of(target)

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        """A layout that cannot work: groups that would share an entry, or an unknown mode."""
        s, where = target.settings.redis, target.where
        plain = [f for f in target.fields if f not in target.aggregates]
        if s.datatype == "HASH" and not s.hash_fields:
            return [f"{where}: datatype HASH needs jw.sqe.state.redis.fieldname.fields"]
        if s.datatype != "HASH" and s.hash_fields:
            return [f"{where}: jw.sqe.state.redis.fieldname.fields is for datatype HASH, and "
                    f"this state is {s.datatype}"]
        keys = s.key_fields or tuple(f for f in plain if f not in s.hash_fields)
        problems = [f"{where}: key or hash field {f!r} must be one of the plain (grouping) "
                    f"fields: {', '.join(plain) or 'none'}"
                    for f in (*keys, *s.hash_fields) if f not in plain]
        loose = [f for f in plain if f not in keys and f not in s.hash_fields]
        if loose:
            problems.append(f"{where}: grouping field(s) {', '.join(loose)} are in neither "
                            "keyname.fields nor fieldname.fields, so groups that differ only "
                            "there would merge into one Redis entry")
        if (target.state_type or "NON_TRANSACTIONAL").upper() not in _MODES:
            problems.append(f"{where}: stateType {target.state_type} is not TRANSACTIONAL, "
                            "OPAQUE or NON_TRANSACTIONAL")
        return problems

    def write(self, frame: DataFrame) -> int:
        return write_aggregates(frame, self.config, self.batch.batch_id)

    def write_empty(self, frame: DataFrame) -> int:
        return 0  # no group to merge; commit records the batch

    def _record(self, consumer: str) -> str:
        """The key of this state's commit record of ``consumer`` (:mod:`sqe.ledger.commits`)."""
        return record_key(consumer, self.config.name)

    def _redis(self, action: str, consumer: str) -> Commit | None:
        client = self.config.endpoint.connect()
        key = self._record(consumer)
        try:
            raw = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
            if action == "commit":
                b = self.batch
                client.hset(key, mapping={"batch": b.batch_id, "offsets": b.offsets or "",
                                          "checkpoint": b.checkpoint or "", "reset": 0})
            elif action == "reset" and raw:
                client.hset(key, mapping={"offsets": "", "reset": 1})
        except redis.RedisError as exc:
            raise StateError(f"{self.describe()}: {self.config.endpoint.describe_error(exc)}"
                             ) from None
        finally:
            client.close()
        if not raw.get("batch"):
            return None
        return Commit(f"{self.describe()} at {self.config.url}", int(raw["batch"]),
                      raw.get("offsets") or None, raw.get("checkpoint") or None,
                      raw.get("reset") == "1")

    def commit(self) -> None:
        """Record the batch (its merges carry its id already: a re-run merges nothing twice),
        and wait for the server's replicas to hold it."""
        self._redis("commit", self.batch.consumer)
        s = self.target.settings.redis
        replicated(self.config, s.replicas, s.replica_timeout, self.batch.consumer,
                   self.batch.batch_id)

    def committed(self, consumer: str) -> Commit | None:
        return self._redis("read", consumer)

    def reset(self, consumer: str) -> Commit | None:
        return self._redis("reset", consumer)


def _entry(df: DataFrame, cfg: AggregateStateConfig, field: str, function: str) -> Column:
    """One aggregate of a group as a struct: key, field, op, tag, value, sketch."""
    d = cfg.delimiter
    keys: list[str | Column] = [F.lit(cfg.name), *cfg.key_fields]
    if cfg.datatype == "HASH":
        hash_parts: list[str | Column] = [*cfg.hash_fields, F.lit(field)]
        key, hfield = joined(keys, d), joined(hash_parts, d)
    else:
        key, hfield = joined([*keys, F.lit(field)], d), F.lit("")
    col = field_column(field)
    kind = df.schema[field].dataType
    sketch = F.lit(None).cast("binary")
    if function in ("createhll", "createhllp"):
        op, tag, value, sketch = "put", "B", F.lit(None).cast("string"), col
    elif isinstance(kind, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        op, tag, value = function, "L", col.cast("string")
    elif isinstance(kind, T.NumericType):
        op, tag, value = function, "D", col.cast("double").cast("string")
    elif function == "max":
        op, tag, value = "max", "S", col.cast("string")
    else:
        raise StateError(f"Redis state {cfg.name}: {function} of field {field} is "
                         f"{kind.simpleString()}, not a number")
    return F.struct(key.alias("k"), hfield.alias("f"), F.lit(op).alias("op"),
                    F.lit(tag).alias("tag"), value.alias("v"), sketch.alias("sketch"))


def _read_task(endpoint: RedisEndpoint, name: str) -> Any:
    """Executors: the raw stored value of each entry (pipelined GET/HGET)."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        try:
            with kept_client(endpoint) as client:
                for batch in batches:
                    keys, fields = batch.column("k").to_pylist(), batch.column("f").to_pylist()
                    pipe = client.pipeline(transaction=False)
                    for k, f in zip(keys, fields, strict=True):
                        pipe.get(k) if f == "" else pipe.hget(k, f)
                    raw = [None if v is None else v.decode("utf-8") for v in pipe.execute()]
                    yield batch.append_column("stored", strings(raw))
        except redis.RedisError as exc:
            raise StateError(f"Redis state {name}: {endpoint.describe_error(exc)}; the batch "
                             "fails and is merged again when it is retried") from None

    return read


def _merge_task(endpoint: RedisEndpoint, name: str, mode: str, batch_id: int,
                expire: int) -> Any:
    """Executors: entries merged by :data:`MERGE_SCRIPT`, many per call, calls pipelined."""

    def merge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        applied = skipped = 0
        try:
            with kept_client(endpoint) as client:
                script = client.register_script(MERGE_SCRIPT)
                for batch in batches:
                    cols = [batch.column(c).to_pylist()
                            for c in ("k", "f", "op", "tag", "v", "expected")]
                    rows = list(zip(*cols, strict=True))
                    pipe = client.pipeline(transaction=False)
                    for start in range(0, len(rows), _ENTRIES_PER_CALL):
                        part = rows[start:start + _ENTRIES_PER_CALL]
                        args: list[Any] = [mode, batch_id, expire]
                        for _, f, op, tag, v, expected in part:
                            args += [f, op, tag, "" if v is None else v, expected or "0"]
                        script(keys=[r[0] for r in part], args=args, client=pipe)
                    for a, s in pipe.execute():
                        applied, skipped = applied + a, skipped + s
        except redis.RedisError as exc:
            raise StateError(f"Redis state {name}: {endpoint.describe_error(exc)}; the batch "
                             "fails and its retry merges with the same batch id") from None
        yield counts_batch(applied=applied, skipped=skipped)

    return merge


def _sketch_puts(entries: DataFrame, cfg: AggregateStateConfig, batch_id: int) -> DataFrame:
    """HLL entries: stored sketch read, unioned with the batch's by Spark, as full values."""
    schema = "k string, f string, op string, tag string, v string, sketch binary, stored string"
    read = entries.mapInArrow(_read_task(cfg.endpoint, cfg.name), schema)
    k = F.lit(batch_id)
    stored = F.col("stored")
    txid, curr, prev = stored_parts(cfg.mode, stored)
    base = F.when(txid.eqNullSafe(k), prev).otherwise(curr) if cfg.mode == "OPAQUE" else curr
    merged = F.when(base.isNull(), F.col("sketch")).otherwise(
        F.hll_union(F.unbase64(base), F.col("sketch"), True))
    quoted = [F.concat(F.lit('"'), c, F.lit('"')) for c in (F.base64(merged), base)]
    value = encoded(cfg.mode, batch_id, "B", *quoted)
    out = read
    if cfg.mode == "TRANSACTIONAL":  # applied already by this batch id: nothing to write
        out = out.where(~txid.eqNullSafe(k))
    return out.select("k", "f", "op", "tag", value.alias("v"),
                      F.when(stored.isNull(), F.lit("0")).otherwise(
                          F.concat(F.lit("1"), stored)).alias("expected"))


def write_aggregates(df: DataFrame, cfg: AggregateStateConfig, batch_id: int) -> int:
    """Merge the batch's aggregates ``df`` into Redis; returns the entries changed."""
    entries = df.select(F.explode(F.array(*[_entry(df, cfg, f, fn) for f, fn in cfg.aggregates]))
                        .alias("e")).select("e.*")
    merges = entries.where((F.col("op") != "put") & F.col("v").isNotNull()).select(
        "k", "f", "op", "tag", "v", F.lit(None).cast("string").alias("expected"))
    if any(fn in ("createhll", "createhllp") for _, fn in cfg.aggregates):
        merges = merges.unionByName(_sketch_puts(entries.where(F.col("op") == "put"), cfg,
                                                 batch_id))
    result = merges.mapInArrow(_merge_task(cfg.endpoint, cfg.name, cfg.mode, batch_id,
                                           cfg.expire_seconds), "applied long, skipped long")
    return task_counts(result).get(None, {}).get("applied", 0)
