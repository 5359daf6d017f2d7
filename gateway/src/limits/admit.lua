-- Checks and charges every descriptor of one request, all or none.
-- KEYS: the descriptors' counters ({scope:value}:kind).
-- ARGV: bucket_secs, buckets, slot_ttl_ms, request_id, expire_at_ms (the
--       caller's deadline in Redis time, 0 for none), then per key:
--       kind ('r' requests, 't' tokens, 'p' parallel, 'l' a lease of rpm or
--       tpm units), limit, amount, need (units that must fit).
-- A lease charges min(amount, limit - used): the whole lease when it fits,
-- what is left otherwise; the caller computes the same from `used`.
-- Time is the Redis server's. rpm/tpm counters are hashes of bucket -> units
-- (the sliding window of window.rs); parallel counters are sorted sets of
-- request ids scored by their expiry, so a crashed replica's slots lapse.
-- Returns {1, tick, used_1, ..., used_n} or {0, index, used, reset_at}, or
-- {2} when run after the caller's deadline (a call that waited in a frozen
-- server or a lost connection): nothing is charged, as nobody waits for it.
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local g = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local rid = ARGV[4]
local expire_at = tonumber(ARGV[5])
if expire_at > 0 and now_ms > expire_at then
  return {2}
end
local tick = math.floor(now_s / g)
local oldest = tick - n + 1
local used = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local base = 5 + (i - 1) * 4
  local kind = ARGV[base + 1]
  local limit = tonumber(ARGV[base + 2])
  local u = 0
  local reset = now_s + 1
  if kind == 'p' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
    u = redis.call('ZCARD', key)
  else
    local kv = redis.call('HGETALL', key)
    local first = nil
    for j = 1, #kv, 2 do
      local b = tonumber(kv[j])
      local v = tonumber(kv[j + 1])
      if b < oldest then
        redis.call('HDEL', key, kv[j])
      else
        u = u + v
        if v > 0 and (first == nil or b < first) then first = b end
      end
    end
    if first ~= nil then reset = (first + n) * g end
  end
  local need = tonumber(ARGV[base + 4])
  if need < 1 then need = 1 end
  if u + need > limit then
    return {0, i, u, reset}
  end
  used[i] = u
end
local out = {1, tick}
for i = 1, #KEYS do
  local key = KEYS[i]
  local base = 5 + (i - 1) * 4
  local kind = ARGV[base + 1]
  local amount = tonumber(ARGV[base + 3])
  if kind == 'l' then
    amount = math.min(amount, tonumber(ARGV[base + 2]) - used[i])
  end
  if kind == 'p' then
    redis.call('ZADD', key, now_ms + ttl, rid)
    redis.call('PEXPIRE', key, ttl)
  elseif amount > 0 then
    redis.call('HINCRBY', key, tick, amount)
    redis.call('EXPIRE', key, (n + 1) * g)
  end
  out[i + 2] = used[i]
end
return out
