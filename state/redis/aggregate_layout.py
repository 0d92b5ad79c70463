"""How an aggregate is stored in one Redis entry: one description, read and written two ways.

SQE's Trident map states keep, per ``stateType``, a JSON value (``L`` integer,
``D`` double, ``S`` string, ``B`` bytes as base64, ``N`` null are the type tags):

* ``TRANSACTIONAL``: ``[K, tag, value]``, where ``K`` is the batch id that last
  changed the entry;
* ``OPAQUE``: ``[K, tag, value, tag, previous]``, ``previous`` being the value
  before batch ``K`` (so a re-run of ``K`` starts again from it);
* ``NON_TRANSACTIONAL``: the bare value.

:data:`LAYOUTS` is that description and nothing else spells it: the Lua merge
script (:data:`MERGE_SCRIPT`, which merges sums and maxima on the Redis server)
decodes and encodes entries with code generated from it, and so do the Spark
expressions that merge HLL sketches on the executors (:func:`stored_parts`,
:func:`encoded`).  A test holds the two to each other.

    >>> LAYOUTS["OPAQUE"].position("previous")
    5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql import Column
from pyspark.sql import functions as F

__all__ = ["LAYOUTS", "Layout", "MERGE_SCRIPT", "StateMode", "encoded", "stored_parts"]

StateMode = Literal["TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL"]
Slot = Literal["batch", "value", "previous"]


@dataclass(frozen=True)
class Layout:
    """The stored JSON of one mode: an array of slots, or (one ``value`` slot) the bare value.

    ``batch`` is one array element (the batch id); ``value`` and ``previous`` are two
    each, a type tag and the value.
    """

    slots: tuple[Slot, ...]

    @property
    def bare(self) -> bool:
        """Whether the entry is the value itself, without batch id or tag."""
        return self.slots == ("value",)

    def position(self, slot: Slot) -> int | None:
        """The 1-based array position of ``slot``'s value (its tag is just before it)."""
        at = 0
        for s in self.slots:
            at += 1 if s == "batch" else 2
            if s == slot:
                return at
        return None


LAYOUTS: dict[StateMode, Layout] = {
    "TRANSACTIONAL": Layout(("batch", "value")),
    "OPAQUE": Layout(("batch", "value", "previous")),
    "NON_TRANSACTIONAL": Layout(("value",)),
}


def _lua_decode(layout: Layout) -> str:
    """Lua that sets ``stored``, ``curr``, ``prev`` from the entry ``raw``."""
    if layout.bare:
        return "curr = nonnull(cjson.decode(raw))"
    out = ["local a = cjson.decode(raw)"]
    for name, slot, conv in (("stored", "batch", "tonumber"), ("curr", "value", "nonnull"),
                             ("prev", "previous", "nonnull")):
        at = layout.position(slot)  # type: ignore[arg-type]
        if at is not None:
            out.append(f"{name} = {conv}(a[{at}])")
    return "; ".join(out)


def _lua_encode(layout: Layout) -> str:
    """Lua that sets ``out``, the entry holding ``new`` (and ``base`` as previous)."""
    if layout.bare:
        return "out = enc(tag, new)"
    pieces = {"batch": "ARGV[2]", "value": "'\"' .. tag .. '\",' .. enc(tag, new)",
              "previous": "before"}
    body = " .. ',' .. ".join(pieces[s] for s in layout.slots)
    return f"out = '[' .. {body} .. ']'"


def _by_mode(code: dict[StateMode, str]) -> str:
    branches = [f"{'if' if i == 0 else 'elseif'} mode == '{mode}' then {text}"
                for i, (mode, text) in enumerate(code.items())]
    return "\n      ".join(branches) + "\n      end"


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
      DECODE
    end
    if mode == 'TRANSACTIONAL' and stored == txid then
      out = false
    else
      local base = curr
      if mode == 'OPAQUE' and stored == txid then base = prev end
      local new = merge(op, tag, base, v)
      local before = '"N",null'
      if base ~= nil then before = '"' .. tag .. '",' .. enc(tag, base) end
      ENCODE
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
""".replace("DECODE", _by_mode({m: _lua_decode(lay) for m, lay in LAYOUTS.items()})).replace(
    "ENCODE", _by_mode({m: _lua_encode(lay) for m, lay in LAYOUTS.items()}))


def stored_parts(mode: StateMode, stored: Column) -> tuple[Column, Column, Column]:
    """``(batch id, value, previous)`` of a stored entry as Spark columns (NULL when absent)."""
    layout = LAYOUTS[mode]
    if layout.bare:
        value = F.from_json(F.concat(F.lit("["), stored, F.lit("]")), "array<string>")[0]
        return F.lit(None).cast("long"), value, F.lit(None).cast("string")
    parts = F.from_json(stored, "array<string>")

    def at(slot: Slot) -> Column:
        pos = layout.position(slot)
        return (F.try_element_at(parts, F.lit(pos)) if pos is not None
                else F.lit(None).cast("string"))

    return at("batch").cast("long"), at("value"), at("previous")


def encoded(mode: StateMode, batch_id: int, tag: str, new: Column, base: Column) -> Column:
    """The entry holding ``new`` (JSON text) after ``base`` (stored JSON text, or NULL)."""
    layout = LAYOUTS[mode]
    if layout.bare:
        return new
    before = F.when(base.isNull(), F.lit('"N",null')).otherwise(
        F.concat(F.lit(f'"{tag}",'), base))
    pieces = {"batch": F.lit(str(batch_id)), "value": F.concat(F.lit(f'"{tag}",'), new),
              "previous": before}
    body = [piece for s in layout.slots for piece in (F.lit(","), pieces[s])][1:]
    return F.concat(F.lit("["), *body, F.lit("]"))
