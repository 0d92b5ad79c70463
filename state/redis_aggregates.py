"""Aggregates merged into Redis exactly once per batch id: SQE's Trident map states on Spark.

An aggregating query (``Sum``, ``Max``, ``CreateHll``/``CreateHllp``, grouped
by its plain fields within the micro-batch) keeps **one Redis entry per group
and aggregate**, laid out as SQE does (``d`` is ``jw.sqe.state.redis.delimiter``):

* ``datatype: HASH``: key ``<objectName>d<keyname fields joined by d>``, field
  ``<fieldname fields joined by d>d<aggregate field>``;
* ``datatype: STRING``: key ``<objectName>d<keyname fields>d<aggregate field>``.

``keyname.fields`` defaults to the plain fields that are not ``fieldname.fields``;
a plain field in neither is an error (its groups would share an entry).

Stored values follow ``stateType``, in SQE's JSON (type tags ``L`` integer,
``D`` double, ``S`` string, ``B`` bytes as base64, ``N`` null), where ``K`` is
the micro-batch id that last changed the entry:

* ``TRANSACTIONAL``: ``[K, tag, value]``; a merge for the batch id already
  stored is not applied again (a re-run batch changes nothing);
* ``OPAQUE``: ``[K, tag, value, tag, previous]``; a merge for the stored batch
  id starts again from ``previous``, so a re-run batch with other contents
  replaces its own earlier contribution instead of adding twice;
* ``NON_TRANSACTIONAL``: the bare value, merged every time.

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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.config.redis_endpoint import RedisEndpoint, state_endpoint
from sqe.errors import StateError
from sqe.lang.compiler import field_column

__all__ = ["AggregateStateConfig", "MERGE_SCRIPT", "write_aggregates"]

StateMode = Literal["TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL"]
_ENTRIES_PER_CALL = 500

#: KEYS: the entries' keys; ARGV: mode, batch id, expire seconds, then per entry
#: field ('' for STRING), op (sum | max | put), tag, value, expected ('0' absent,
#: '1'..raw: what a put read).  Returns {applied, skipped}.
MERGE_SCRIPT = r"""
local mode, txid, expire = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function read(key, field)
  if field == '' then return redis.call('GET', key) end
  return redis.call('HGET', key, field)
end
local function nonnull(v) if v == cjson.null then return nil end return v end
local function enc(tag, v)
  if v == nil then return 'null' end
  if tag == 'L' then
    if math.abs(v) > 9007199254740992 then
      error('integer sum ' .. string.format('%.0f', v) .. ' is beyond 2^53')
    end
    return string.format('%d', v)
  end
  if tag == 'D' then return string.format('%.17g', v) end
  return cjson.encode(v)
end
local function merge(op, tag, base, v)
  if base == nil then return v end
  if op == 'sum' then return base + v end
  if tag == 'S' then if tostring(v) > tostring(base) then return v end return base end
  if v > base then return v end return base
end
local n = #KEYS
local raws = {}
for i = 1, n do
  local b = 3 + (i - 1) * 5
  local raw = read(KEYS[i], ARGV[b + 1])
  raws[i] = raw
  if ARGV[b + 2] == 'put' then
    local seen = '0'
    if raw then seen = '1' .. raw end
    if seen ~= ARGV[b + 5] then
      return redis.error_reply('CONFLICT ' .. KEYS[i] .. ' ' .. ARGV[b + 1] ..
        ' changed since it was read')
    end
  end
end
local applied, skipped = 0, 0
for i = 1, n do
  local b = 3 + (i - 1) * 5
  local key, field, op, tag, value = KEYS[i], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local raw, out = raws[i], nil
  if op == 'put' then
    out = value
  else
    local v = value
    if tag ~= 'S' then v = tonumber(value) end
    local stored, curr, prev = nil, nil, nil
    if raw then
      if mode == 'NON_TRANSACTIONAL' then
        curr = nonnull(cjson.decode(raw))
      else
        local a = cjson.decode(raw)
        stored, curr, prev = tonumber(a[1]), nonnull(a[3]), nonnull(a[5])
      end
    end
    if mode == 'TRANSACTIONAL' and stored == txid then
      out = false
    else
      local base = curr
      if mode == 'OPAQUE' and stored == txid then base = prev end
      local new = merge(op, tag, base, v)
      if mode == 'TRANSACTIONAL' then
        out = '[' .. ARGV[2] .. ',"' .. tag .. '",' .. enc(tag, new) .. ']'
      elseif mode == 'OPAQUE' then
        local before = '"N",null'
        if base ~= nil then before = '"' .. tag .. '",' .. enc(tag, base) end
        out = '[' .. ARGV[2] .. ',"' .. tag .. '",' .. enc(tag, new) .. ',' .. before .. ']'
      else
        out = enc(tag, new)
      end
    end
  end
  if out then
    if field == '' then redis.call('SET', key, out) else redis.call('HSET', key, field, out) end
    if expire > 0 then redis.call('EXPIRE', key, expire) end
    applied = applied + 1
  else
    skipped = skipped + 1
  end
end
return {applied, skipped}
"""


@dataclass(frozen=True)
class AggregateStateConfig:
    """Where and how one aggregating query merges into Redis."""

    name: str
    endpoint: RedisEndpoint
    datatype: str
    key_fields: tuple[str, ...]
    hash_fields: tuple[str, ...]
    aggregates: tuple[tuple[str, str], ...]   # (output field, SQE function)
    delimiter: str
    expire_seconds: int
    mode: StateMode

    @classmethod
    def from_settings(cls, name: str, fields: list[str], aggregates: Mapping[str, str],
                      settings: Mapping[str, Any], state_type: str | None) -> AggregateStateConfig:
        """The config from a query's resolved options; a layout that cannot work is an error."""
        where = f"Redis state {name}"
        plain = [f for f in fields if f not in aggregates]
        datatype = settings["jw.sqe.state.redis.datatype"]
        hashes = tuple(settings["jw.sqe.state.redis.fieldname.fields"] or ())
        if datatype == "HASH" and not hashes:
            raise StateError(f"{where}: datatype HASH needs jw.sqe.state.redis.fieldname.fields")
        if datatype != "HASH" and hashes:
            raise StateError(f"{where}: jw.sqe.state.redis.fieldname.fields is for datatype "
                             f"HASH, and this state is {datatype}")
        keys = tuple(settings["jw.sqe.state.redis.keyname.fields"] or
                     [f for f in plain if f not in hashes])
        for f in (*keys, *hashes):
            if f not in plain:
                raise StateError(f"{where}: key or hash field {f!r} must be one of the plain "
                                 f"(grouping) fields: {', '.join(plain) or 'none'}")
        loose = [f for f in plain if f not in keys and f not in hashes]
        if loose:
            raise StateError(f"{where}: grouping field(s) {', '.join(loose)} are in neither "
                             "keyname.fields nor fieldname.fields, so groups that differ only "
                             "there would merge into one Redis entry")
        mode = (state_type or "NON_TRANSACTIONAL").upper()
        if mode not in ("TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL"):
            raise StateError(f"{where}: stateType {state_type} is not TRANSACTIONAL, OPAQUE or "
                             "NON_TRANSACTIONAL")
        try:
            endpoint = state_endpoint(settings)
        except ValueError as exc:
            raise StateError(f"{where}: {exc}") from None
        return cls(name, endpoint, datatype, keys, hashes, tuple(aggregates.items()),
                   settings["jw.sqe.state.redis.delimiter"],
                   settings["jw.sqe.state.redis.expireintervalsec"], mode)  # type: ignore[arg-type]


def _joined(parts: list[Column], delimiter: str) -> Column:
    return F.concat_ws(delimiter, *parts)


def _entry(df: DataFrame, cfg: AggregateStateConfig, field: str, function: str) -> Column:
    """One aggregate of a group as a struct: key, field, op, tag, value, sketch."""
    d = cfg.delimiter
    keys = [F.lit(cfg.name), *[field_column(f).cast("string") for f in cfg.key_fields]]
    if cfg.datatype == "HASH":
        key = _joined(keys, d)
        hfield = _joined([*[field_column(f).cast("string") for f in cfg.hash_fields],
                          F.lit(field)], d)
    else:
        key, hfield = _joined([*keys, F.lit(field)], d), F.lit("")
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
        import redis

        client = endpoint.connect()
        try:
            for batch in batches:
                keys, fields = batch.column("k").to_pylist(), batch.column("f").to_pylist()
                pipe = client.pipeline(transaction=False)
                for k, f in zip(keys, fields, strict=True):
                    pipe.get(k) if f == "" else pipe.hget(k, f)
                raw = [None if v is None else v.decode("utf-8") for v in pipe.execute()]
                yield batch.append_column("stored", pa.array(raw, pa.string()))
        except redis.RedisError as exc:
            raise StateError(f"Redis state {name}: {endpoint.describe_error(exc)}; the batch "
                             "fails and is merged again when it is retried") from None
        finally:
            client.close()

    return read


def _merge_task(endpoint: RedisEndpoint, name: str, mode: str, batch_id: int,
                expire: int) -> Any:
    """Executors: entries merged by :data:`MERGE_SCRIPT`, many per call, calls pipelined."""

    def merge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import redis

        client = endpoint.connect()
        script = client.register_script(MERGE_SCRIPT)
        applied = skipped = 0
        try:
            for batch in batches:
                cols = [batch.column(c).to_pylist() for c in ("k", "f", "op", "tag", "v", "expected")]
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
        finally:
            client.close()
        yield pa.RecordBatch.from_pydict({"applied": [applied], "skipped": [skipped]})

    return merge


def _sketch_puts(entries: DataFrame, cfg: AggregateStateConfig, batch_id: int) -> DataFrame:
    """HLL entries: stored sketch read, unioned with the batch's by Spark, as full values."""
    schema = "k string, f string, op string, tag string, v string, sketch binary, stored string"
    read = entries.mapInArrow(_read_task(cfg.endpoint, cfg.name), schema)
    k = F.lit(batch_id)
    stored = F.col("stored")
    if cfg.mode == "NON_TRANSACTIONAL":
        parts = F.from_json(F.concat(F.lit("["), stored, F.lit("]")), "array<string>")
        txid, curr, prev = F.lit(None).cast("long"), parts[0], F.lit(None).cast("string")
    else:
        parts = F.from_json(stored, "array<string>")
        txid, curr, prev = parts[0].cast("long"), parts[2], F.try_element_at(parts, F.lit(5))
    base = F.when(txid.eqNullSafe(k), prev).otherwise(curr) if cfg.mode == "OPAQUE" else curr
    merged = F.when(base.isNull(), F.col("sketch")).otherwise(
        F.hll_union(F.unbase64(base), F.col("sketch"), True))
    new = F.concat(F.lit('"'), F.base64(merged), F.lit('"'))
    before = F.when(base.isNull(), F.lit('"N",null')).otherwise(
        F.concat(F.lit('"B","'), base, F.lit('"')))
    value = {"TRANSACTIONAL": F.concat(F.lit(f'[{batch_id},"B",'), new, F.lit("]")),
             "OPAQUE": F.concat(F.lit(f'[{batch_id},"B",'), new, F.lit(","), before, F.lit("]")),
             "NON_TRANSACTIONAL": new}[cfg.mode]
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
    row = result.agg(F.sum("applied"), F.sum("skipped")).first()
    return int(row[0] or 0)
