-- Settles one admitted request: token reservations become the real usage,
-- parallel slots are freed. Also ends a lease (one key, kind 'l'): its grant
-- leaves the bucket it was charged in and what was spent of it is charged
-- again now, so each spent unit stays counted a full window after it was
-- spent. Every change to a bucket changes the counter's sum ('-1', see
-- admit.lua) by as much.
-- KEYS: the request's tokens and parallel counters (or the lease's counter).
-- ARGV: request_id; admitted_tick in decimal; the kinds, one letter per key
--       ('t', 'p' or 'l'); the numbers, little-endian doubles: bucket_secs,
--       buckets, tokens_used (units spent, for a lease), then per key
--       reserved (granted, for a lease). Packed as in admit.lua.
-- Arguments go to redis.call as strings where they can (see admit.lua):
-- the admission's bucket as the caller wrote it, a computed amount
-- formatted once for both of its calls.
local rid = ARGV[1]
local admitted = ARGV[2]
local kinds = ARGV[3]
local num = {struct.unpack('<' .. string.rep('d', 3 + #KEYS), ARGV[4])}
local g = num[1]
local n = num[2]
local used = num[3]
-- The current bucket, read from the server's clock only when a charge
-- needs it (a refund or a freed slot does not).
local tick = nil

-- Adds `units` to the current bucket (and the sum); the key's expiry moves
-- when the bucket is new.
local function charge(key, units)
  if tick == nil then
    tick = string.format('%d', math.floor(tonumber(redis.call('TIME')[1]) / g))
  end
  local units_arg = string.format('%d', units)
  if redis.call('HINCRBY', key, tick, units_arg) == units then
    redis.call('EXPIRE', key, (n + 1) * g)
  end
  redis.call('HINCRBY', key, '-1', units_arg)
end

-- Takes `units` back from the admission's bucket (and from the sum) while
-- the bucket is there, deleting it when nothing is left in it. A bucket
-- present is counted in the sum, live or not yet dropped; one already
-- dropped has nothing to give back. Buckets never hold 0 or less, so a
-- result of exactly -units means the bucket was absent.
local function refund(key, units)
  if units <= 0 then
    return
  end
  local down = string.format('%d', -units)
  local left = redis.call('HINCRBY', key, admitted, down)
  if left == -units then
    redis.call('HDEL', key, admitted)
    return
  end
  if left <= 0 then
    redis.call('HDEL', key, admitted)
    down = string.format('%d', -(units + left))
  end
  redis.call('HINCRBY', key, '-1', down)
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local kind = string.sub(kinds, i, i)
  local reserved = num[3 + i]
  if kind == 'p' then
    redis.call('ZREM', key, rid)
  elseif kind == 'l' then
    refund(key, reserved)
    if used > 0 then
      charge(key, used)
    end
  else
    local delta = used - reserved
    if delta > 0 then
      charge(key, delta)
    elseif delta < 0 then
      refund(key, -delta)
    end
  end
end
return 1
