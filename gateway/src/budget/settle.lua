-- Settles one request: its holds are released and its real cost added to
-- every counter it reserved against (nano-USD, integers). Idempotent for
-- the release (a hold already lapsed or released is skipped); the cost is
-- added whether the hold was still there or not.
-- KEYS: per principal, its hash and its holds (as reserve.lua).
-- ARGV: request_id, cost, deadline (Redis ms; 0 none), then per principal:
-- counters, then their prefixes.
-- A counter that is missing (Redis lost it) is left missing: the next
-- reservation seeds it with a figure that includes this cost.
-- Reply: {1}; {2} when run after its deadline (nothing done: the sender
-- owes the cost and releases the holds later).
local deadline = tonumber(ARGV[3])
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then
    return {2}
  end
end
local rid = ARGV[1]
local cost = ARGV[2]
local pos = 4
for i = 1, #KEYS / 2 do
  local h = KEYS[2 * i - 1]
  local z = KEYS[2 * i]
  local n = tonumber(ARGV[pos])
  pos = pos + 1
  local v = redis.call('HGET', h, 'hold:' .. rid)
  if v then
    local hold = cjson.decode(v)
    for _, p in ipairs(hold.p) do
      redis.call('HINCRBY', h, p .. 'reserved', -hold.a)
    end
    redis.call('HDEL', h, 'hold:' .. rid)
    redis.call('ZREM', z, rid)
  end
  for c = 1, n do
    local p = ARGV[pos]
    pos = pos + 1
    if cost ~= '0' and redis.call('HEXISTS', h, p .. 'spent') == 1 then
      redis.call('HINCRBY', h, p .. 'spent', cost)
    end
  end
end
return {1}
