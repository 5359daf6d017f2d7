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
-- `<prefix>reserved` and one `hold:<request_id>` per admitted request in
-- flight. A counter missing is seeded with the caller's figure (Postgres's
-- total plus what it settled but has not written); a caller whose period
-- is still running, on a counter whose period ended, starts the period
-- over from its figures; a caller whose period ended (it has not read the
-- reset yet) neither resets nor seeds; `owed` (spend the caller settled
-- while Redis did not take it) is added to an existing counter.
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
local amount = tonumber(ARGV[3])
local idle = math.max(86400000, 2 * ttl)

local function release(h, r)
  local v = redis.call('HGET', h, 'hold:' .. r)
  if not v then
    return
  end
  local hold = cjson.decode(v)
  for _, p in ipairs(hold.p) do
    redis.call('HINCRBY', h, p .. 'reserved', -hold.a)
  end
  redis.call('HDEL', h, 'hold:' .. r)
end

local refused = nil
local charged = {}
local pos = 5
for i = 1, #KEYS / 2 do
  local h = KEYS[2 * i - 1]
  local z = KEYS[2 * i]
  local gen = tonumber(ARGV[pos])
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2
  -- holds of requests that never settled (a crashed replica) lapse
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 64)
  for _, r in ipairs(gone) do
    release(h, r)
    redis.call('ZREM', z, r)
  end
  -- a caller whose period already ended has not read the reset yet
  local stale = gen > 0 and gen <= now
  local stored = redis.call('HGET', h, 'gen')
  if not stored then
    redis.call('HSET', h, 'gen', ARGV[pos - 2])
  elseif gen ~= tonumber(stored) and not stale then
    local ended = tonumber(stored)
    if ended > 0 and ended <= now then
      -- the counter's period ended and the caller read the next one:
      -- every counter starts over from the caller's figures
      for _, f in ipairs(redis.call('HKEYS', h)) do
        if string.sub(f, -5) == 'spent' and string.sub(f, 1, 5) ~= 'hold:' then
          redis.call('HDEL', h, f)
        end
      end
    end
    -- (otherwise an admin changed the period's length: no reset)
    redis.call('HSET', h, 'gen', ARGV[pos - 2])
  end
  local prefixes = {}
  for c = 1, n do
    local p = ARGV[pos]
    local max = tonumber(ARGV[pos + 1])
    local seed = ARGV[pos + 2]
    local owed = ARGV[pos + 3]
    pos = pos + 4
    local spent = redis.call('HGET', h, p .. 'spent')
    if not spent then
      -- a caller still in the previous period knows only what it owes
      if stale then
        seed = owed
      end
      redis.call('HSET', h, p .. 'spent', seed)
      spent = tonumber(seed)
    elseif owed ~= '0' then
      spent = redis.call('HINCRBY', h, p .. 'spent', owed)
    else
      spent = tonumber(spent)
    end
    local reserved = tonumber(redis.call('HGET', h, p .. 'reserved') or '0')
    if not refused and max >= 0 and spent + reserved + amount > max then
      refused = {0, i, c, spent, reserved}
    end
    prefixes[#prefixes + 1] = p
  end
  charged[#charged + 1] = {h, z, prefixes}
end
if refused then
  return refused
end
for _, c in ipairs(charged) do
  local h, z, prefixes = c[1], c[2], c[3]
  if not redis.call('HGET', h, 'hold:' .. rid) then
    for _, p in ipairs(prefixes) do
      redis.call('HINCRBY', h, p .. 'reserved', amount)
    end
    redis.call('HSET', h, 'hold:' .. rid, cjson.encode({a = amount, p = prefixes}))
    redis.call('ZADD', z, now + ttl, rid)
  end
  redis.call('PEXPIRE', h, idle)
  redis.call('PEXPIRE', z, idle)
end
return {1}
