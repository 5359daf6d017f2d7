-- Settles one admitted request: token reservations become the real usage,
-- parallel slots are freed.
-- KEYS: the request's tokens and parallel counters.
-- ARGV: bucket_secs, buckets, admitted_tick, request_id, tokens_used, then
--       per key: kind ('t' or 'p'), reserved.
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local g = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local admitted = tonumber(ARGV[3])
local rid = ARGV[4]
local used = tonumber(ARGV[5])
local tick = math.floor(now_s / g)
for i = 1, #KEYS do
  local key = KEYS[i]
  local kind = ARGV[4 + i * 2]
  local reserved = tonumber(ARGV[5 + i * 2])
  if kind == 'p' then
    redis.call('ZREM', key, rid)
  else
    local delta = used - reserved
    if delta > 0 then
      redis.call('HINCRBY', key, tick, delta)
      redis.call('EXPIRE', key, (n + 1) * g)
    elseif delta < 0 and admitted > tick - n then
      local v = redis.call('HGET', key, admitted)
      if v then
        local left = tonumber(v) + delta
        if left > 0 then
          redis.call('HSET', key, admitted, left)
        else
          redis.call('HDEL', key, admitted)
        end
      end
    end
  end
end
return 1
