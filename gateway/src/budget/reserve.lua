-- Reserves one request's worst-case cost against every budget it belongs
-- to, all or none (nano-USD, integers).
-- KEYS: per principal (a key, user or team), its hash `{budget:<scope>:<id>}`
--   and its holds `{budget:<scope>:<id>}:holds` (request id -> expiry, ms).
-- ARGV: hold_ttl_ms, request_id, amount, deadline (Redis ms; 0 none), then
--   per principal: gen, counters, and per counter: prefix ('' for the
--   principal's own budget, 'model:<group>:' for a key's per-model one),
--   max (-1 none), seed, owed.
-- A principal's hash holds `gen` (when its budget period ends: the
-- caller's budget_reset_at in ms, 0 without one), `<prefix>spent`,
-- `<prefix>reserved`, one `hold:<request_id>` per admitted request in
-- flight (`{"a":<amount>,"p":[<prefixes>]}`), and `touch` (the hour of its
-- last upkeep). A counter missing is seeded with the caller's figure
-- (Postgres's total plus what it settled but has not written); a caller
-- whose period is still running, on a counter whose period ended, starts
-- the period over from its figures; a caller whose period ended (it has
-- not read the reset yet) neither resets nor seeds; `owed` (spend the
-- caller settled while Redis did not take it) is added to an existing
-- counter.
-- Holds of requests that never settled (a crashed replica) lapse: they are
-- released when they would make the reservation refuse, and at a
-- principal's upkeep (once an hour: its hash's idle expiry renewed, up to
-- 64 lapsed holds released). Otherwise one HMGET reads everything a
-- principal's check needs, and decimals from the caller go to redis.call
-- as they came (Redis formats a Lua number with snprintf, and tonumber is
-- strtod: each costs about a third of a redis.call).
-- Reply: {1} admitted; {0, principal, counter, spent, reserved} refused
-- (seeds and owed applied all the same); {2} run after its deadline
-- (nothing done).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[4])
if deadline > 0 and now > deadline then
  return {2}
end
local ttl = tonumber(ARGV[1])
local rid = ARGV[2]
local amount_arg = ARGV[3]
local amount = tonumber(amount_arg)
local hold_field = 'hold:' .. rid
local idle = math.max(86400000, 2 * ttl)
local hour = math.floor(now / 3600000)

-- Releases hold `r` of hash `h` (written by any version: decoded as JSON).
local function release(h, r)
  local v = redis.call('HGET', h, 'hold:' .. r)
  if not v then
    return
  end
  local hold = cjson.decode(v)
  if hold.a ~= 0 then
    for _, p in ipairs(hold.p) do
      redis.call('HINCRBY', h, p .. 'reserved', -hold.a)
    end
  end
  redis.call('HDEL', h, 'hold:' .. r)
end

-- Releases up to 64 lapsed holds of a principal; whether it released any.
local function sweep(h, z)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 64)
  for _, r in ipairs(gone) do
    release(h, r)
    redis.call('ZREM', z, r)
  end
  return #gone > 0
end

-- Per principal: its hash, holds, first counter's argument, counters,
-- whether this request already holds it, and per counter spent, reserved.
local ps = {}
local pos = 5
for i = 1, #KEYS / 2 do
  local h = KEYS[2 * i - 1]
  local z = KEYS[2 * i]
  local gen_arg = ARGV[pos]
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2
  local fields = {'gen', 'touch', hold_field}
  for c = 1, n do
    local p = ARGV[pos + 4 * (c - 1)]
    fields[2 * c + 2] = p .. 'spent'
    fields[2 * c + 3] = p .. 'reserved'
  end
  local v = redis.call('HMGET', h, unpack(fields))
  if tonumber(v[2]) ~= hour then
    redis.call('HSET', h, 'touch', hour)
    redis.call('PEXPIRE', h, idle + 3600000)
    if sweep(h, z) then
      v = redis.call('HMGET', h, unpack(fields))
    end
  end
  -- a caller whose period already ended has not read the reset yet
  local gen = tonumber(gen_arg)
  local stale = gen > 0 and gen <= now
  local stored = v[1]
  local reset = false
  if not stored then
    redis.call('HSET', h, 'gen', gen_arg)
  elseif stored ~= gen_arg and gen ~= tonumber(stored) and not stale then
    local ended = tonumber(stored)
    if ended > 0 and ended <= now then
      -- the counter's period ended and the caller read the next one:
      -- every counter starts over from the caller's figures
      for _, f in ipairs(redis.call('HKEYS', h)) do
        if string.sub(f, -5) == 'spent' and string.sub(f, 1, 5) ~= 'hold:' then
          redis.call('HDEL', h, f)
        end
      end
      reset = true
    end
    -- (otherwise an admin changed the period's length: no reset)
    redis.call('HSET', h, 'gen', gen_arg)
  end
  local p = {h = h, z = z, at = pos, n = n, held = v[3], fields = fields}
  for c = 1, n do
    local at = pos + 4 * (c - 1)
    local prefix, seed, owed = ARGV[at], ARGV[at + 2], ARGV[at + 3]
    local spent = v[2 * c + 2]
    if reset then
      spent = nil
    end
    if not spent then
      -- a caller still in the previous period knows only what it owes
      if stale then
        seed = owed
      end
      redis.call('HSET', h, prefix .. 'spent', seed)
      spent = tonumber(seed)
    elseif owed ~= '0' then
      spent = redis.call('HINCRBY', h, prefix .. 'spent', owed)
    else
      spent = tonumber(spent)
    end
    p[2 * c - 1] = spent
    p[2 * c] = tonumber(v[2 * c + 3] or '0')
  end
  pos = pos + 4 * n
  ps[i] = p
end

-- The first counter without room, as the reply; nil when all have room.
local function refusal()
  for i, p in ipairs(ps) do
    for c = 1, p.n do
      local max = ARGV[p.at + 4 * (c - 1) + 1]
      if max ~= '-1' and p[2 * c - 1] + p[2 * c] + amount > tonumber(max) then
        return {0, i, c, p[2 * c - 1], p[2 * c]}
      end
    end
  end
  return nil
end

local refused = refusal()
if refused then
  -- lapsed holds may be what fills it: release them and look again
  local swept = false
  for _, p in ipairs(ps) do
    if sweep(p.h, p.z) then
      swept = true
      local v = redis.call('HMGET', p.h, unpack(p.fields))
      p.held = v[3]
      for c = 1, p.n do
        p[2 * c] = tonumber(v[2 * c + 3] or '0')
      end
    end
  end
  if swept then
    refused = refusal()
  end
  if refused then
    return refused
  end
end

-- The hold as JSON, written directly when nothing in it needs escaping
-- (what cjson would write, the amount exact).
local plain = string.find(amount_arg, '^%d+$') ~= nil
for _, p in ipairs(ps) do
  if not p.held then
    local prefixes = {}
    for c = 1, p.n do
      local prefix = ARGV[p.at + 4 * (c - 1)]
      prefixes[c] = prefix
      if string.find(prefix, '["\\%c]') then
        plain = false
      end
    end
    local hold
    if plain then
      hold = '{"a":' .. amount_arg .. ',"p":["' .. table.concat(prefixes, '","') .. '"]}'
    else
      hold = cjson.encode({a = amount, p = prefixes})
    end
    for c = 1, p.n do
      redis.call('HINCRBY', p.h, prefixes[c] .. 'reserved', amount_arg)
    end
    redis.call('HSET', p.h, hold_field, hold)
    redis.call('ZADD', p.z, now + ttl, rid)
    redis.call('PEXPIRE', p.z, idle)
  end
end
return {1}
