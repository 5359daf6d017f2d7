-- Settles one admitted request: token reservations become the real usage,
-- parallel slots are freed. Also ends a lease (one key, kind 'l'): its grant
-- leaves the bucket it was charged in and what was spent of it is charged
-- again now, so each spent unit stays counted a full window after it was
-- spent.
-- KEYS: the request's tokens and parallel counters (or the lease's counter).
-- ARGV: bucket_secs, buckets, admitted_tick, request_id, tokens_used (units
--       spent, for a lease), then per key: kind ('t', 'p' or 'l'), reserved
--       (granted, for a lease).
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
  elseif kind == 'l' then
    if admitted > tick - n then
      local v = redis.call('HGET', key, admitted)
      if v then
        local left = tonumber(v) - reserved
        if left > 0 then
          redis.call('HSET', key, admitted, left)
        else
          redis.call('HDEL', key, admitted)
        end
      end
    end
    if used > 0 then
      redis.call('HINCRBY', key, tick, used)
      redis.call('EXPIRE', key, (n + 1) * g)
    end
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
