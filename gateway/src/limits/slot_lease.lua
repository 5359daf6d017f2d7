-- Leased parallel slots (lease mode, see slot_lease.rs): a replica's lease
-- of one parallel counter is a set of members `<lease id>:<n>` of the
-- counter's sorted set (limiter.lua's admission, kind 'p'), scored by their expiry like a
-- request's slot, so a crashed replica's slots lapse.
-- KEYS[1]: the parallel counter.
-- ARGV: lease id, life_ms, expire_at_ms (the caller's deadline in Redis
--       time, 0 for none), limit, want (new members), first (number of the
--       first new member), nkeep, then nkeep ranges `lo hi` (members lo to
--       hi - 1) held: renewed (scored now + life, added again if they had
--       lapsed), then ranges of members returned (removed).
-- Returns {1, granted, used} (used: members before the grant, this lease's
-- included), {0, used, reset_at} when want > 0 and not one new slot fits
-- (the renewal and the returns are done all the same), or {2} when run
-- after the caller's deadline (nothing is done: nobody waits for it).
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
local id = ARGV[1]
local life = tonumber(ARGV[2])
local expire_at = tonumber(ARGV[3])
if expire_at > 0 and now_ms > expire_at then
  return {2}
end
local limit = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local first = tonumber(ARGV[6])
local nkeep = tonumber(ARGV[7])
local score = now_ms + life

-- Runs `f` on the members lo to hi - 1, in batches of at most 256, as ZADD
-- pairs (`scored`) or as names.
local function each(lo, hi, scored, f)
  local batch = {}
  for j = lo, hi - 1 do
    if scored then
      batch[#batch + 1] = score
    end
    batch[#batch + 1] = id .. ':' .. j
    if #batch >= 512 then
      f(batch)
      batch = {}
    end
  end
  if #batch > 0 then
    f(batch)
  end
end

local function add(batch)
  redis.call('ZADD', key, unpack(batch))
end

local function remove(batch)
  redis.call('ZREM', key, unpack(batch))
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
for r = 1, nkeep do
  each(tonumber(ARGV[6 + 2 * r]), tonumber(ARGV[7 + 2 * r]), true, add)
end
for r = 8 + 2 * nkeep, #ARGV - 1, 2 do
  each(tonumber(ARGV[r]), tonumber(ARGV[r + 1]), false, remove)
end
local used = redis.call('ZCARD', key)
local granted = 0
local out = nil
if want > 0 then
  if used + 1 > limit then
    out = {0, used, now_s + 1}
  else
    granted = math.min(want, limit - used)
    each(first, first + granted, true, add)
  end
end
-- The key lives at least as long as the members just scored (a request's
-- slot may have given it a longer life: kept).
local pttl = redis.call('PTTL', key)
if pttl ~= -2 and pttl < life then
  redis.call('PEXPIRE', key, life)
end
return out or {1, granted, used}
