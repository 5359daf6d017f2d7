-- A replica's slice of one budget counter (lease mode): takes, resizes or
-- returns the slice and adds the spend the replica settled against it, in
-- one atomic step (nano-USD, integers).
-- KEYS: the principal's hash `{budget:<scope>:<id>}` and its holds (as
--   reserve.lua).
-- ARGV: 1 hold_ttl_ms, 2 slice id, 3 deadline (Redis ms; 0 none), 4 gen,
--   5 prefix, 6 max (-1 none), 7 seed, 8 report (spend to add: settled
--   against the slice since the last call, plus spend owed from a fallback),
--   9 shrink (what leaves the slice: the spend settled against it and the
--   room handed back), 10 need (0: only report and shrink), 11 divisor (a
--   grant is the room left / divisor, at least `need`; without a limit,
--   need x divisor x 100), 12 idle ('1': the
--   replica holds nothing in flight against it: the hold becomes exactly the
--   grant, which heals a surplus a lost reply left).
-- The slice is a hold like a request's (`hold:<slice id>`, `{"a":..,"p":[..]}`,
-- in the holds set with its expiry), so reserve.lua counts it, sweeps it
-- when its replica died, and settle.lua can release it. After the call the
-- hold is what it was, less `shrink`, plus the grant: the sum of every hold never passes what
-- the budget has left, whatever the number of replicas, and a slice shrinks
-- with the room left (room / divisor, down to one request's `need`).
-- Seeding and budget periods as in reserve.lua (a counter seeded here
-- already holds the report: it is not added again).
-- Reply: {1, grant, spent, reserved}; {3, 0, spent, reserved} when less
-- than four times `need` is left (the caller holds room per request, as
-- reserve.lua does, so the budget's last requests park nothing in slices);
-- {0, 0, spent, reserved} when not even `need` fits (the slice is still
-- shrunk either way); {2} run after its
-- deadline (nothing done).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[3])
if deadline > 0 and now > deadline then
  return {2}
end
local h, z = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[1])
local sid = ARGV[2]
local gen_arg, prefix, max_arg = ARGV[4], ARGV[5], ARGV[6]
local seed, report = ARGV[7], ARGV[8]
local shrink, need, divisor = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local hold_field = 'hold:' .. sid
local idle = math.max(86400000, 2 * ttl)
local hour = math.floor(now / 3600000)
local fields = {'gen', 'touch', hold_field, prefix .. 'spent', prefix .. 'reserved'}

-- Releases hold `r` (any writer's JSON).
local function release(r)
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

-- Releases up to 64 lapsed holds (never this slice: the call renews it).
local function sweep()
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 64)
  local any = false
  for _, r in ipairs(gone) do
    if r ~= sid then
      release(r)
      redis.call('ZREM', z, r)
      any = true
    end
  end
  return any
end

local v = redis.call('HMGET', h, unpack(fields))
if tonumber(v[2]) ~= hour then
  redis.call('HSET', h, 'touch', hour)
  redis.call('PEXPIRE', h, idle + 3600000)
  if sweep() then
    v = redis.call('HMGET', h, unpack(fields))
  end
end
local gen = tonumber(gen_arg)
local stale = gen > 0 and gen <= now
local stored = v[1]
local reset = false
if not stored then
  redis.call('HSET', h, 'gen', gen_arg)
elseif stored ~= gen_arg and gen ~= tonumber(stored) and not stale then
  local ended = tonumber(stored)
  if ended > 0 and ended <= now then
    for _, f in ipairs(redis.call('HKEYS', h)) do
      if string.sub(f, -5) == 'spent' and string.sub(f, 1, 5) ~= 'hold:' then
        redis.call('HDEL', h, f)
      end
    end
    reset = true
  end
  redis.call('HSET', h, 'gen', gen_arg)
end
local spent = v[4]
if reset then
  spent = nil
end
if not spent then
  if stale then
    seed = report
  end
  redis.call('HSET', h, prefix .. 'spent', seed)
  spent = tonumber(seed)
elseif report ~= '0' then
  spent = redis.call('HINCRBY', h, prefix .. 'spent', report)
else
  spent = tonumber(spent)
end

-- This slice's hold now, and the counter's holds without it.
local held = 0
if v[3] then
  local a = string.match(v[3], '^{"a":(%d+),')
  held = tonumber(a) or cjson.decode(v[3]).a
end
local others = tonumber(v[5] or '0') - held
local keep = 0
if ARGV[12] ~= '1' then
  keep = math.max(held - shrink, 0)
end

local grant = 0
local admitted = 1
if need > 0 then
  if max_arg == '-1' then
    -- No limit: no room to park, so the slice need only outlast its life
    -- (a thousand requests' worst case at the default divisor); a small one
    -- ran dry under a few dozen requests in flight and sent them to a hold
    -- each in Redis.
    grant = need * divisor * 100
  else
    local max = tonumber(max_arg)
    local room = max - spent - others - keep
    if room < need and sweep() then
      local r = redis.call('HGET', h, prefix .. 'reserved')
      others = tonumber(r or '0') - held
      room = max - spent - others - keep
    end
    if room >= 4 * need then
      grant = math.max(need, math.floor(room / divisor))
    elseif room >= need then
      -- the budget's last few requests: no slice (it would park room
      -- another replica needs), a hold per request instead
      admitted = 3
    else
      admitted = 0
    end
  end
end

-- Numbers go to redis.call as decimal strings: Redis formats a Lua number
-- with snprintf("%.17g"), about a third of a redis.call's cost.
local after = keep + grant
if after ~= held then
  redis.call('HINCRBY', h, prefix .. 'reserved', string.format('%d', after - held))
end
if after > 0 then
  local p = prefix
  if string.find(p, '["\\%c]') then
    redis.call('HSET', h, hold_field, cjson.encode({a = after, p = {p}}))
  else
    redis.call('HSET', h, hold_field, string.format('{"a":%d,"p":["%s"]}', after, p))
  end
  redis.call('ZADD', z, string.format('%d', now + ttl), sid)
  redis.call('PEXPIRE', z, string.format('%d', idle))
elseif v[3] then
  redis.call('HDEL', h, hold_field)
  redis.call('ZREM', z, sid)
end
return {admitted, grant, spent, others + after}
