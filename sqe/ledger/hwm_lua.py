"""The Lua scripts of the HWM store (:mod:`sqe.ledger.hwm`): its commit, the application of a
commit's staged rows, the deletion of stages no commit can take, and its three reads.

Each runs atomically on the Redis server over one consumer's keys, passed in
the same order every time -- ``KEYS``: hwm, ts (the old layout's update times),
batch, commit, age (the time index), then the commit's stage keys.  The layout
and the protocol are described in :mod:`sqe.ledger.hwm`; this module holds only the
server-side code, so the Python around it reads in one sitting.
"""

__all__ = ["APPLY", "COMMIT", "DROP", "LAST", "LOAD", "MARKS"]

# Server time in ms and the TTL (ARGV[1], seconds) in ms: the scripts that judge age start so.
NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1]) * 1000
"""

# a > b for canonical signed decimal strings: exact for all int64 (Lua numbers are doubles).
GT = """
local function gt(a, b)
  if a == b then return false end
  local na, nb = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if na ~= nb then return nb end
  if na then a = a:sub(2); b = b:sub(2) end
  local r
  if #a ~= #b then r = #a > #b else r = a > b end
  if na then return not r end
  return r
end
"""

# Deletes stage ``key`` unless the apply hash names it (rows a commit left to apply), and takes
# it out of the register of stages: what both a refused commit and a commit do with the stages
# no commit can take, and DROP with the ones it is given.
DROP_STAGE = """
local function drop_stage(apply, register, key)
  local gone = 0
  if redis.call('HEXISTS', apply, 's:' .. key) == 0 then gone = redis.call('DEL', key) end
  redis.call('ZREM', register, key)
  return gone
end
"""

# KEYS: apply, the register of stages, then stage keys: each dropped (DROP_STAGE); replies how
# many stages were deleted.
DROP = DROP_STAGE + """
local gone = 0
for i = 3, #KEYS do gone = gone + drop_stage(KEYS[1], KEYS[2], KEYS[i]) end
return gone
"""

# KEYS: hwm, ts (the old layout), batch, commit, age, apply, applied, the register of stages,
# stage keys...; ARGV: ttl,
# batch id, number of stages, the batch's end offsets, the checkpoint, the batch the writer saw
# committed before ('' when none), (datatype, expire seconds) per stage, then
# "<pid>:<partition>", offset pairs.  A store holding less than the batch seen replies
# 'SQE_BEHIND <the stored batch as JSON>' (it lost commits and their marks since).  A refusal
# deletes the stages (a stage the last commit left to apply stays), takes them out of the
# register, and replies with an error
# 'SQE_STALE <the stored commit as JSON>'; 'SQE_OTHER <...>' when the same batch id ends at
# other offsets as text
# (HwmStore.commit compares them as JSON); 'SQE_PENDING' while rows of the last commit are
# still to be applied (the caller applies them, APPLY, and commits again).  The stages are not
# applied here: they are recorded in the apply hash, their expiry removed, for APPLY to apply
# in chunks, so the script's work does not grow with the batch's rows.  A commit deletes the
# registered stages of its batch and before that it did not record (another run's, which no
# commit can take now; sqe.ledger.stages) and empties the register up to its batch.
COMMIT = NOW + GT + DROP_STAGE + """
local stages = tonumber(ARGV[3])
local stored = redis.call('GET', KEYS[3])
local batch = tonumber(ARGV[2])
if ARGV[6] ~= '' and ((not stored) or tonumber(stored) < tonumber(ARGV[6])) then
  return redis.error_reply('SQE_BEHIND ' .. cjson.encode({batch = stored or ''}))
end
if stored and batch <= tonumber(stored) then
  for s = 1, stages do drop_stage(KEYS[6], KEYS[8], KEYS[8 + s]) end
  local made = redis.call('HMGET', KEYS[4], 'offsets', 'checkpoint')
  local offsets = made[1] or ''
  local record = ' ' .. cjson.encode({batch = stored, offsets = offsets,
                                      checkpoint = made[2] or ''})
  if batch < tonumber(stored) then return redis.error_reply('SQE_STALE' .. record) end
  if offsets ~= '' and ARGV[4] ~= '' and offsets ~= ARGV[4] then
    return redis.error_reply('SQE_OTHER' .. record)
  end
  return 0
end
if redis.call('EXISTS', KEYS[6]) == 1 then return redis.error_reply('SQE_PENDING') end
local pending = 0
for s = 1, stages do
  if redis.call('EXISTS', KEYS[8 + s]) == 1 then
    redis.call('PERSIST', KEYS[8 + s])
    redis.call('HSET', KEYS[6], 's:' .. KEYS[8 + s], ARGV[5 + 2 * s] .. ' ' .. ARGV[6 + 2 * s])
    pending = pending + 1
  end
end
if pending > 0 then redis.call('HSET', KEYS[6], 'batch', ARGV[2])
else redis.call('SET', KEYS[7], ARGV[2]) end
if redis.call('EXISTS', KEYS[2]) == 1 then  -- the old layout: its times move into the index
  local old = redis.call('HGETALL', KEYS[2])
  for i = 1, #old, 2 do redis.call('ZADD', KEYS[5], tonumber(old[i + 1]), old[i]) end
  redis.call('DEL', KEYS[2])
end
for i = 7 + 2 * stages, #ARGV, 2 do
  local field, offset = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', KEYS[1], field)
  if (not old) or gt(offset, old) then redis.call('HSET', KEYS[1], field, offset) end
  redis.call('ZADD', KEYS[5], now, field)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', string.format('(%d', now - ttl),
                           'LIMIT', 0, 1000)
if #expired > 0 then
  redis.call('HDEL', KEYS[1], unpack(expired))
  redis.call('ZREM', KEYS[5], unpack(expired))
end
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', ARGV[2])) do
  drop_stage(KEYS[6], KEYS[8], dead)
end
redis.call('SET', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[4], 'offsets', ARGV[4], 'checkpoint', ARGV[5], 'reset', '0')
return 1
"""

# KEYS: apply, applied, one stage the apply hash names; ARGV: the rows to apply.  Applies about
# that many of the stage's rows (a page of its scan comes whole; a small hash, a listpack, is
# one page): SET or HSET, and EXPIRE, as COMMIT recorded, and deletes them from the stage, in
# one step, so a crash between two calls applies nothing twice.  Each step goes on from where
# the last one's scan of the stage stopped (its cursor, kept in the apply hash as
# 'c:<stage>'): a scan from the start would walk again over the buckets the steps before
# emptied, and a big stage's apply would take the square of its rows.  A stage emptied leaves
# the apply hash; the last one deletes it and records its batch as applied.  Replies how many
# rows the stage still holds (0: done; -1: not a stage to apply).
APPLY = """
local spec = redis.call('HGET', KEYS[1], 's:' .. KEYS[3])
if not spec then return -1 end
local space = string.find(spec, ' ', 1, true)
local datatype, expire = string.sub(spec, 1, space - 1), tonumber(string.sub(spec, space + 1))
local want, done = tonumber(ARGV[1]), {}
local cursor = redis.call('HGET', KEYS[1], 'c:' .. KEYS[3]) or '0'
repeat
  local scan = redis.call('HSCAN', KEYS[3], cursor, 'COUNT', want - #done)
  cursor = scan[1]
  local rows = scan[2]
  for i = 1, #rows, 2 do
    local f = rows[i]
    local colon = string.find(f, ':', 1, true)
    local n = tonumber(string.sub(f, 1, colon - 1))
    local key = string.sub(f, colon + 1, colon + n)
    if datatype == 'HASH' then
      redis.call('HSET', key, string.sub(f, colon + n + 1), rows[i + 1])
    else
      redis.call('SET', key, rows[i + 1])
    end
    if expire > 0 then redis.call('EXPIRE', key, expire) end
    done[#done + 1] = f
  end
until #done >= want or cursor == '0'  -- about ``want``: a scan's page comes whole
for i = 1, #done, 1000 do
  redis.call('HDEL', KEYS[3], unpack(done, i, math.min(i + 999, #done)))
end
local left = redis.call('HLEN', KEYS[3])
redis.call('HSET', KEYS[1], 'c:' .. KEYS[3], cursor)
if left == 0 then
  redis.call('HDEL', KEYS[1], 's:' .. KEYS[3], 'c:' .. KEYS[3])
  if redis.call('HLEN', KEYS[1]) <= 1 then
    local batch = redis.call('HGET', KEYS[1], 'batch')
    redis.call('DEL', KEYS[1])
    if batch then redis.call('SET', KEYS[2], batch) end
  end
end
return left
"""


# The last committed batch id and its commit record: what every read starts with.
COMMIT_RECORD = """
local commit = redis.call('HMGET', KEYS[4], 'offsets', 'checkpoint', 'reset')
local out = {redis.call('GET', KEYS[3]) or '', commit[1] or '', commit[2] or '', commit[3] or ''}
"""

LAST = COMMIT_RECORD + "return out\n"

LOAD = NOW + COMMIT_RECORD + """
local live = {}
if redis.call('EXISTS', KEYS[2]) == 1 then  -- the old layout, before its first commit
  local ts = redis.call('HGETALL', KEYS[2])
  for i = 1, #ts, 2 do
    if tonumber(ts[i + 1]) >= now - ttl then table.insert(live, ts[i]) end
  end
else
  live = redis.call('ZRANGEBYSCORE', KEYS[5], string.format('%d', now - ttl), '+inf')
end
for i = 1, #live do
  local offset = redis.call('HGET', KEYS[1], live[i])
  if offset then
    table.insert(out, live[i])
    table.insert(out, offset)
  end
end
return out
"""

# The marks of the fields ARGV[2..] ("<pid>:<partition>"), in order: the offset, or false for
# a field without a mark or with one older than the TTL.  KEYS as the commit's (hwm, ts, batch,
# commit, age): the time is the index's score, or the old layout's ts hash before its first
# commit.  Work and reply grow with the fields asked, not with the marks stored.
MARKS = NOW + """
local old = redis.call('EXISTS', KEYS[2]) == 1
local out = {}
for i = 2, #ARGV do
  local field = ARGV[i]
  local stamp
  if old then stamp = redis.call('HGET', KEYS[2], field)
  else stamp = redis.call('ZSCORE', KEYS[5], field) end
  local offset = false
  if stamp and tonumber(stamp) >= now - ttl then
    offset = redis.call('HGET', KEYS[1], field) or false
  end
  out[i - 1] = offset
end
return out
"""
