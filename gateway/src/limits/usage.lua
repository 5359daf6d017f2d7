-- Reads one counter's current use, as the fleet's counters hold it, and
-- changes nothing (the admin API's live limits; see usage.rs).
-- KEYS[1]: the counter (`{scope:value}:kind`).
-- ARGV: 'p' for a parallel counter (its slots not lapsed), or 'w' for a
--       window counter, then bucket_secs and buckets (limiter.lua's
--       window): the units of its buckets still in the window.
-- Returns {units}.
local t = redis.call('TIME')
local now_s = tonumber(t[1])
if ARGV[1] == 'p' then
  local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
  return {redis.call('ZCOUNT', KEYS[1], '(' .. now_ms, '+inf')}
end
local g = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local oldest = math.floor(now_s / g) - n + 1
local kv = redis.call('HGETALL', KEYS[1])
local sum = 0
for j = 1, #kv, 2 do
  local b = tonumber(kv[j])
  -- Negative fields are limiter.lua's bookkeeping, not buckets.
  if b ~= nil and b >= oldest then
    sum = sum + tonumber(kv[j + 1])
  end
end
return {sum}
