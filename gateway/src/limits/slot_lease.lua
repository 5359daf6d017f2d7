-- Leased parallel slots (lease mode, see slot_lease.rs): a replica's lease
-- of one parallel counter is slots `p:<lease id>:<n>` of the scope's hash
-- (limiter.lua's layout: `p` the slots held, `p:<id>` each slot's expiry,
-- `x` the key's expiry as last set), expiring like a request's slot, so a
-- crashed replica's slots lapse.
-- KEYS[1]: the scope's hash.
-- ARGV: lease id, life_ms, expire_at_ms (the caller's deadline in Redis
--       time, 0 for none), limit, want (new members), first (number of the
--       first new member), nkeep, then nkeep ranges `lo hi` (members lo to
--       hi - 1) held: renewed (expiring now + life, added again if they
--       had lapsed), then ranges of members returned (removed).
-- Returns {1, granted, used} (used: slots before the grant, this lease's
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
local expiry = now_ms + life

-- The slots held, lapsed ones dropped (every call: a lease call is rare
-- next to requests, and it is where the count is made exact again).
local kv = redis.call('HGETALL', key)
local held = {}
local count = 0
local known_x = nil
local lapsed = {}
for j = 1, #kv, 2 do
  local f = kv[j]
  if string.sub(f, 1, 2) == 'p:' then
    if tonumber(kv[j + 1]) <= now_ms then
      lapsed[#lapsed + 1] = f
    else
      held[f] = true
      count = count + 1
    end
  elseif f == 'x' then
    known_x = tonumber(kv[j + 1])
  end
end

-- Commands with many fields go in batches of at most 512 arguments.
local function flush(cmd, batch)
  if #batch > 0 then
    redis.call(cmd, key, unpack(batch))
  end
end
local function push(cmd, batch, ...)
  for _, a in ipairs({...}) do
    batch[#batch + 1] = a
  end
  if #batch >= 512 then
    flush(cmd, batch)
    return {}
  end
  return batch
end

-- Lapsed slots go first: a renewal below may set one of them again.
local gone = {}
for _, f in ipairs(lapsed) do
  gone = push('HDEL', gone, f)
end
flush('HDEL', gone)
gone = {}
local sets = {}
for r = 1, nkeep do
  for j = tonumber(ARGV[6 + 2 * r]), tonumber(ARGV[7 + 2 * r]) - 1 do
    local f = 'p:' .. id .. ':' .. j
    if not held[f] then
      held[f] = true
      count = count + 1
    end
    sets = push('HSET', sets, f, expiry)
  end
end
for r = 8 + 2 * nkeep, #ARGV - 1, 2 do
  for j = tonumber(ARGV[r]), tonumber(ARGV[r + 1]) - 1 do
    local f = 'p:' .. id .. ':' .. j
    if held[f] then
      held[f] = nil
      count = count - 1
      gone = push('HDEL', gone, f)
    end
  end
end
local used = count
local granted = 0
local out = nil
if want > 0 then
  if used + 1 > limit then
    out = {0, used, now_s + 1}
  else
    granted = math.min(want, limit - used)
    for j = first, first + granted - 1 do
      sets = push('HSET', sets, 'p:' .. id .. ':' .. j, expiry)
    end
    count = count + granted
  end
end
flush('HDEL', gone)
-- The key lives at least as long as the slots just set (a request's slot
-- may have given it a longer life: kept).
local secs = math.max(math.ceil(life / 1000), 1)
local at = nil
if known_x == nil or known_x < now_s + secs then
  at = now_s + 2 * secs
  sets = push('HSET', sets, 'x', at)
end
sets = push('HSET', sets, 'p', count)
flush('HSET', sets)
if at then
  redis.call('EXPIREAT', key, at)
end
return out or {1, granted, used}
