"""The Redis state: a query's rows written as Redis strings or hashes.

SQE's options ``jw.sqe.state.redis.*`` decide the command per row:

* ``datatype: HASH``: ``HSET <keyname fields joined by the delimiter>
  <fieldname fields joined> <value>``;
* ``datatype: STRING``: ``SET <keyname fields joined> <value>``;

where the value is the one selected field that is neither a key nor a hash
field (a JSON object of them when there are several).  ``expireintervalsec``
> 0 adds ``EXPIRE`` on every written key.  Keys, fields and values are built
with Spark built-ins; each Spark task sends its rows in pipelined chunks.

Exactly once (DESIGN.md section 3): when the state lives in the same Redis
server and database as the consumer's HWM store, the rows are *staged*
(:func:`stage_redis`): the executors write them into one hash of the HWM
store, ``sqe:{<consumer>}:stage:<batch>:<n>``, field ``<key bytes>:<key><hash
field>``, and the HWM commit script applies every staged row, the new HWMs
and the batch id in one atomic step (:meth:`state.hwm.HwmStore.commit`).  A
crash before that step leaves only a stage, which expires after a day and
is rewritten by the retry.  A state on another server is written directly
before the commit; ``SET`` and ``HSET`` of the same data are idempotent, so a
re-run batch leaves the same state there too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.config.redis_endpoint import RedisEndpoint, state_endpoint
from sqe.errors import StateError
from sqe.lang.compiler import field_column

__all__ = ["RedisStateConfig", "STAGE_TTL_SECONDS", "stage_redis", "write_redis"]

_PIPELINE_ROWS = 5_000

#: How long a stage of a batch that never committed survives.
STAGE_TTL_SECONDS = 86_400


@dataclass(frozen=True)
class RedisStateConfig:
    """Where and how one query writes to Redis."""

    name: str
    endpoint: RedisEndpoint
    datatype: str
    key_fields: tuple[str, ...]
    hash_fields: tuple[str, ...]
    value_fields: tuple[str, ...]
    delimiter: str
    expire_seconds: int

    @classmethod
    def from_settings(cls, name: str, fields: list[str],
                      settings: Mapping[str, Any]) -> RedisStateConfig:
        """The config of a query's Redis state from its resolved options."""
        keys = tuple(settings["jw.sqe.state.redis.keyname.fields"])
        hashes = tuple(settings["jw.sqe.state.redis.fieldname.fields"])
        datatype = settings["jw.sqe.state.redis.datatype"]
        values = tuple(f for f in fields if f not in keys and f not in hashes)
        where = f"Redis state {name}"
        if not keys:
            raise StateError(f"{where}: jw.sqe.state.redis.keyname.fields names no field, "
                             "so there is no Redis key to write")
        if datatype == "HASH" and not hashes:
            raise StateError(f"{where}: datatype HASH needs jw.sqe.state.redis.fieldname.fields")
        if not values:
            raise StateError(f"{where}: every selected field is a key or hash field; "
                             "select one more field to be the value")
        try:
            endpoint = state_endpoint(settings)
        except ValueError as exc:
            raise StateError(f"{where}: {exc}") from None
        return cls(name, endpoint, datatype, keys, hashes, values,
                   settings["jw.sqe.state.redis.delimiter"],
                   settings["jw.sqe.state.redis.expireintervalsec"])

    @property
    def url(self) -> str:
        """The Redis URL of this state, without its password (for messages)."""
        return self.endpoint.display


def _joined(fields: tuple[str, ...], delimiter: str) -> Column:
    return F.concat_ws(delimiter, *[field_column(f).cast("string") for f in fields])


def _value(df: DataFrame, fields: tuple[str, ...]) -> Column:
    if len(fields) == 1:
        col = field_column(fields[0])
        return col if df.schema[fields[0]].dataType.typeName() == "binary" else col.cast("string")
    return F.to_json(F.struct(*[field_column(f) for f in fields]))


def prepare_redis(df: DataFrame, cfg: RedisStateConfig) -> DataFrame:
    """Columns ``_rk`` (key), ``_rf`` (hash field or NULL) and ``_rv`` (value) per row."""
    field = (_joined(cfg.hash_fields, cfg.delimiter) if cfg.datatype == "HASH"
             else F.lit(None).cast("string"))
    return df.select(_joined(cfg.key_fields, cfg.delimiter).alias("_rk"), field.alias("_rf"),
                     _value(df, cfg.value_fields).alias("_rv"))


def _writer_task(name: str, endpoint: RedisEndpoint, datatype: str, expire_seconds: int,
                 one_key: bool = False) -> Any:
    """The function each Spark task runs: ``_rk``/``_rf``/``_rv`` rows sent as SET or HSET.

    ``one_key``: every row has the same key (a stage), so EXPIRE is sent once per chunk.
    """

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import redis

        client = endpoint.connect()
        written = 0
        try:
            for batch in batches:
                keys = batch.column("_rk").to_pylist()
                fields = batch.column("_rf").to_pylist()
                values = batch.column("_rv").to_pylist()
                for start in range(0, len(keys), _PIPELINE_ROWS):
                    pipe = client.pipeline(transaction=False)
                    for i in range(start, min(start + _PIPELINE_ROWS, len(keys))):
                        value = "" if values[i] is None else values[i]
                        if datatype == "HASH":
                            pipe.hset(keys[i], fields[i], value)
                        else:
                            pipe.set(keys[i], value)
                        if expire_seconds and not one_key:
                            pipe.expire(keys[i], expire_seconds)
                    if expire_seconds and one_key:
                        pipe.expire(keys[start], expire_seconds)
                    pipe.execute()
                written += batch.num_rows
        except redis.RedisError as exc:
            raise StateError(f"Redis state {name}: {endpoint.describe_error(exc)}; the batch "
                             "fails and is written again when it is retried") from None
        finally:
            client.close()
        yield pa.RecordBatch.from_pydict({"written": [written]})

    return write


def _send(rows: DataFrame, task: Any) -> int:
    result = rows.mapInArrow(task, "written long")
    return int(result.agg(F.sum("written")).first()[0] or 0)


def write_redis(df: DataFrame, cfg: RedisStateConfig) -> int:
    """Write ``df`` to Redis from the executors; returns the number of rows written."""
    return _send(prepare_redis(df, cfg),
                 _writer_task(cfg.name, cfg.endpoint, cfg.datatype, cfg.expire_seconds))


def stage_redis(df: DataFrame, cfg: RedisStateConfig, store: RedisEndpoint, stage_key: str) -> int:
    """Stage ``df``'s rows in hash ``stage_key`` of the HWM store; returns the rows staged.

    The commit script applies them (see the module docstring); nothing
    reaches ``cfg``'s keys before it does.
    """
    rows = prepare_redis(df, cfg)
    staged = rows.select(
        F.lit(stage_key).alias("_rk"),
        F.concat(F.octet_length("_rk").cast("string"), F.lit(":"), F.col("_rk"),
                 F.coalesce(F.col("_rf"), F.lit(""))).alias("_rf"),
        F.col("_rv"))
    return _send(staged, _writer_task(cfg.name, store, "HASH", STAGE_TTL_SECONDS, one_key=True))
