-- Settles one request: its holds are released and its real cost added to
-- every counter it reserved against (nano-USD, integers). Idempotent for
-- the release (a hold already lapsed or released is skipped); the cost is
-- added whether the hold was still there or not.
-- KEYS: per principal, its hash and its holds (as reserve.lua).
-- ARGV: request_id, cost, deadline (Redis ms; 0 none), then per principal:
-- counters, then their prefixes.
-- A counter that is missing (Redis lost it) is left missing: the next
-- reservation seeds it with a figure that includes this cost.
-- One HMGET per principal reads the hold and which counters exist; a hold
-- as reserve.lua writes it is read without cjson and its amount given to
-- redis.call as the decimal it is (any other JSON is decoded).
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
local hold_field = 'hold:' .. rid

-- Takes a hold's amount back from each counter it was reserved against.
local function release(h, v)
  local a, list = string.match(v, '^{"a":(%d+),"p":%[(.*)%]}$')
  if a and not string.find(list, '\\', 1, true) then
    if a == '0' then
      return
    end
    local down = '-' .. a
    for p in string.gmatch(list, '"([^"]*)"') do
      redis.call('HINCRBY', h, p .. 'reserved', down)
    end
    return
  end
  local hold = cjson.decode(v)
  if hold.a ~= 0 then
    for _, p in ipairs(hold.p) do
      redis.call('HINCRBY', h, p .. 'reserved', -hold.a)
    end
  end
end

local pos = 4
for i = 1, #KEYS / 2 do
  local h = KEYS[2 * i - 1]
  local z = KEYS[2 * i]
  local n = tonumber(ARGV[pos])
  pos = pos + 1
  local fields = {hold_field}
  for c = 1, n do
    fields[c + 1] = ARGV[pos + c - 1] .. 'spent'
  end
  local v = redis.call('HMGET', h, unpack(fields))
  if v[1] then
    release(h, v[1])
    redis.call('HDEL', h, hold_field)
    redis.call('ZREM', z, rid)
  end
  if cost ~= '0' then
    for c = 1, n do
      if v[c + 1] then
        redis.call('HINCRBY', h, fields[c + 1], cost)
      end
    end
  end
  pos = pos + n
end
return {1}
