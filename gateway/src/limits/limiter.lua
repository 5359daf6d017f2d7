-- The limiter's Redis side: a batch of operations in arrival order, each
-- all or none on its own. One call carries every admission and settlement
-- a link has ready (group commit), so what a call costs Redis besides its
-- operations (dispatch, argument tables, the reply, the clock) is paid
-- once per batch, not once per request.
--
-- Layout: every counter of one scope (a key, a team, ...) lives in one
-- hash named `{scope:value}` (docs/rate-limits.md), so a batch reads
-- each scope's fields with one HMGET and writes them with one HSET, however
-- many counters and operations of the batch touch it:
--   rate counters, c = 'r' (requests) or 't' (tokens): c<bucket> the units
--     charged in a bucket of the sliding window (window.rs), and three
--     bookkeeping fields named by negative numbers (no bucket is negative):
--     c-1 the sum of every bucket present, c-2 the lowest bucket that may
--     still be present, c-3 the bucket at which the sum was last recomputed
--     from the buckets. A check reads them instead of summing up to 61
--     buckets, drops the buckets that left the window as it goes, and
--     recomputes the sum once a window (or whenever a field is missing),
--     which heals any drift. Every change to a bucket changes the sum by as
--     much.
--   parallel slots: p the slots held, and p:<id> the expiry (Redis time,
--     ms) of each slot, a request's (its id) or a lease member's
--     (slot_lease.lua), so a crashed replica's slots lapse: they are swept
--     only when the counter looks full, where they could change a verdict.
--     A settlement frees a slot only while its field is there, so freeing
--     twice (a retried release) frees once.
--   x: the unix second the key expires at, as last set here. The key lives
--     at least a window (or a slot's life) past its last write: its expiry
--     is moved, to twice that, only when less than that is left.
--
-- ARGV[1]: one letter per operation, 'a' an admission, 'f' a settlement.
-- Each operation then takes its keys from KEYS in turn (as many as its
-- kinds argument has letters; entries of one scope name the same hash)
-- and its arguments from ARGV in turn:
--   admission: request_id; the kinds, one letter per entry ('r' requests, 't' tokens, 'p' parallel, 'R' / 'T' a lease
--     of request / token units); the numbers, little-endian doubles:
--     bucket_secs, buckets, slot_ttl_ms, expire_at_ms (the caller's
--     deadline in Redis time, 0 for none), then per entry limit, amount,
--     need (units that must fit).
--   settlement: request_id; admitted_tick in decimal; the kinds; the
--     numbers: bucket_secs, buckets, tokens_used (units spent, for a
--     lease), then per entry reserved (granted, for a lease).
-- Numbers come packed because Lua's tonumber (strtod) costs more than a
-- redis.call's overhead here, and each argument costs Redis about as much
-- again.
-- Returns one reply per operation; a batch of one returns that reply alone:
--   admission: {1, tick, used_1, ..., used_n}, {0, index, used, reset_at},
--     or {2} when run after the caller's deadline (a call that waited in a
--     frozen server or a lost connection): nothing is charged, as nobody
--     waits for it;
--   settlement: 1.
-- Admission: a lease charges min(amount, limit - used): the whole lease
-- when it fits, what is left otherwise; the caller computes the same from
-- `used`.
-- Settlement: token reservations become the real usage, parallel slots are
-- freed. It also ends a lease (one entry, 'R' or 'T'): its grant leaves
-- the bucket it was charged in and what was spent of it is charged again
-- now, so each spent unit stays counted a full window after it was spent.
-- Time is the Redis server's, read at most once per batch and only when an
-- operation needs it (a settlement that only refunds or frees slots does
-- not).
local now_s = nil
local now_ms = nil
local function clock()
  if now_s == nil then
    local t = redis.call('TIME')
    now_s = tonumber(t[1])
    now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
end

-- The batch's view of the hashes it touches: per hash, the fields to read
-- (every operation's, asked before any runs), their values once read
-- (false when absent), and the writes staged (a field set to a value, or
-- deleted), which go out together once the batch has run, so operations
-- on one scope in one batch share its read and its write. What an
-- operation reads sees what the earlier ones staged.
local view = {list = {}, by = {}}

-- The hash `key`, with the field x asked for.
local function hash_of(key)
  local h = view.by[key]
  if h == nil then
    h = {key = key, fields = {'x'}, asked = {x = true}, vals = {}, put = nil, del = nil, life = 0}
    view.by[key] = h
    view.list[#view.list + 1] = h
  end
  return h
end

-- Asks for field f of h to be read.
local function ask(h, f)
  if not h.asked[f] then
    h.asked[f] = true
    h.fields[#h.fields + 1] = f
  end
end

-- At most this many fields a command: unpack's stack stays small.
local CHUNK = 1000

-- Reads every field asked for: one HMGET per hash (per CHUNK fields).
local function read()
  for _, h in ipairs(view.list) do
    local fields = h.fields
    for from = 1, #fields, CHUNK do
      local to = math.min(from + CHUNK - 1, #fields)
      local got = redis.call('HMGET', h.key, unpack(fields, from, to))
      for j = from, to do
        h.vals[fields[j]] = got[j - from + 1]
      end
    end
  end
end

-- Stages field f of h set to `value` (and the view's value with it).
local function put(h, f, value)
  h.put = h.put or {}
  h.put[f] = value
  if h.del then
    h.del[f] = nil
  end
  h.vals[f] = value
end

-- Stages field f of h deleted.
local function drop(h, f)
  h.del = h.del or {}
  h.del[f] = true
  if h.put then
    h.put[f] = nil
  end
  h.vals[f] = false
end

-- The key must live `secs` more seconds.
local function live(h, secs)
  if secs > h.life then
    h.life = secs
  end
end

-- Runs `cmd` on h's key with `args`, CHUNK at a time (pairs kept whole).
local function chunked(cmd, h, args)
  for from = 1, #args, CHUNK do
    redis.call(cmd, h.key, unpack(args, from, math.min(from + CHUNK - 1, #args)))
  end
end

-- Writes what h has staged: one HSET and one HDEL at most, and an
-- EXPIREAT when the key's known expiry is too close. Run once the batch
-- is done, and before anything reads h from Redis directly.
local function flush(h)
  local at = nil
  if h.life > 0 then
    local x = tonumber(h.vals['x'])
    if x == nil or x < now_s + h.life then
      at = now_s + 2 * h.life
      put(h, 'x', at)
    end
  end
  if h.put then
    local args = {}
    for f, value in pairs(h.put) do
      args[#args + 1] = f
      args[#args + 1] = value
    end
    chunked('HSET', h, args)
    h.put = nil
  end
  if h.del then
    local gone = {}
    for f in pairs(h.del) do
      gone[#gone + 1] = f
    end
    chunked('HDEL', h, gone)
    h.del = nil
  end
  if at then
    redis.call('EXPIREAT', h.key, at)
  end
end

-- The bucket of a rate counter field (nil for a field of another counter,
-- or the slots).
local function bucket_of(f, c)
  if string.sub(f, 1, 1) ~= c then
    return nil
  end
  return tonumber(string.sub(f, 2))
end

-- Recomputes counter c's sum from its live buckets, deleting the dead ones
-- (and the bookkeeping, when no bucket is left); nil when it has no bucket.
-- Written at once, and the view updated.
local function recount(h, c, tick, oldest)
  flush(h)
  local kv = redis.call('HGETALL', h.key)
  local sum = 0
  local buckets = 0
  local dead = {}
  for j = 1, #kv, 2 do
    local b = bucket_of(kv[j], c)
    if b == nil or b < 0 then
      -- Another counter's field, or a bookkeeping one.
    elseif b < oldest then
      dead[#dead + 1] = kv[j]
    else
      sum = sum + tonumber(kv[j + 1])
      buckets = buckets + 1
      h.vals[kv[j]] = kv[j + 1]
    end
  end
  if buckets == 0 then
    dead[#dead + 1] = c .. '-1'
    dead[#dead + 1] = c .. '-2'
    dead[#dead + 1] = c .. '-3'
  end
  if #kv > 0 then
    chunked('HDEL', h, dead)
  end
  for _, f in ipairs(dead) do
    h.vals[f] = false
  end
  if buckets == 0 then
    return nil
  end
  redis.call('HSET', h.key, c .. '-1', sum, c .. '-2', oldest, c .. '-3', tick)
  h.vals[c .. '-1'] = sum
  h.vals[c .. '-2'] = oldest
  h.vals[c .. '-3'] = tick
  return sum
end

-- The units counter c holds in the window; nil when it has none stored.
-- Buckets that left the window are dropped at once.
local function window_sum(h, c, tick, oldest, n)
  local sum = tonumber(h.vals[c .. '-1'])
  local low = tonumber(h.vals[c .. '-2'])
  local counted = tonumber(h.vals[c .. '-3'])
  if sum == nil or low == nil or counted == nil or tick - counted >= n or oldest - low > n then
    return recount(h, c, tick, oldest)
  end
  if low < oldest then
    flush(h)
    local gone = {}
    for b = low, oldest - 1 do
      gone[#gone + 1] = c .. b
    end
    local values = redis.call('HMGET', h.key, unpack(gone))
    local dropped = {}
    for j = 1, #gone do
      if values[j] then
        sum = sum - tonumber(values[j])
        dropped[#dropped + 1] = gone[j]
        h.vals[gone[j]] = false
      end
    end
    if #dropped > 0 then
      redis.call('HDEL', h.key, unpack(dropped))
    end
    redis.call('HSET', h.key, c .. '-1', sum, c .. '-2', oldest)
    h.vals[c .. '-1'] = sum
    h.vals[c .. '-2'] = oldest
  end
  return sum
end

-- The unix second at which refused counter c's oldest unit stops counting.
local function reset_of(h, c, oldest, n, g)
  flush(h)
  local kv = redis.call('HGETALL', h.key)
  local first = nil
  for j = 1, #kv, 2 do
    local b = bucket_of(kv[j], c)
    if b ~= nil and b >= oldest and tonumber(kv[j + 1]) > 0 and (first == nil or b < first) then
      first = b
    end
  end
  if first == nil then
    return now_s + 1
  end
  return (first + n) * g
end

-- Drops the lapsed slots of h (their expiry passed); the slots left.
-- Written at once, and the view updated.
local function sweep(h)
  flush(h)
  local kv = redis.call('HGETALL', h.key)
  local held = 0
  local lapsed = {}
  for j = 1, #kv, 2 do
    local f = kv[j]
    if string.sub(f, 1, 2) == 'p:' then
      if tonumber(kv[j + 1]) <= now_ms then
        lapsed[#lapsed + 1] = f
        h.vals[f] = false
      else
        held = held + 1
      end
    end
  end
  chunked('HDEL', h, lapsed)
  redis.call('HSET', h.key, 'p', held)
  h.vals['p'] = held
  return held
end

-- The double formats of the numbers arguments, by how many they hold.
local formats = {}
local function numbers(count, arg)
  local f = formats[count]
  if f == nil then
    f = '<' .. string.rep('d', count)
    formats[count] = f
  end
  return {struct.unpack(f, arg)}
end

-- The counter of kind letter k: 'r', 't' or 'p'.
local function counter_of(k)
  if k == 'R' then
    return 'r'
  elseif k == 'T' then
    return 't'
  end
  return k
end

-- An admission's fields, asked for before the batch runs.
local function ask_admit(op)
  local tick_name = op.tick_name
  for i = 1, op.nk do
    local h = hash_of(KEYS[op.k0 + i])
    local c = counter_of(string.sub(op.kinds, i, i))
    if c == 'p' then
      ask(h, 'p')
      ask(h, op.slot)
    else
      ask(h, c .. '-1')
      ask(h, c .. '-2')
      ask(h, c .. '-3')
      ask(h, c .. tick_name)
    end
  end
end

-- Checks and charges admission `op` (all or none); the reply.
local function admit(op)
  local nk = op.nk
  local kinds = op.kinds
  local num = op.num
  local g = num[1]
  local n = num[2]
  local ttl = num[3]
  local expire_at = num[4]
  if expire_at > 0 and now_ms > expire_at then
    return {2}
  end
  local tick = op.tick
  local tick_name = op.tick_name
  local oldest = tick - n + 1
  local slot = op.slot
  -- The reply, holding each counter's usage as it is checked.
  local out = {1, tick}
  for i = 1, nk do
    local h = hash_of(KEYS[op.k0 + i])
    local c = counter_of(string.sub(kinds, i, i))
    local base = 4 + (i - 1) * 3
    local limit = num[base + 1]
    local need = num[base + 3]
    if need < 1 then need = 1 end
    local u = 0
    if c == 'p' then
      u = tonumber(h.vals['p']) or 0
      if u + need > limit then
        u = sweep(h)
      end
    else
      u = window_sum(h, c, tick, oldest, n) or 0
    end
    if u + need > limit then
      local reset = now_s + 1
      if c ~= 'p' then
        reset = reset_of(h, c, oldest, n, g)
      end
      return {0, i, u, reset}
    end
    out[i + 2] = u
  end
  local window_life = (n + 1) * g
  local slot_life = math.max(math.ceil(ttl / 1000), 1)
  for i = 1, nk do
    local h = hash_of(KEYS[op.k0 + i])
    local k = string.sub(kinds, i, i)
    local c = counter_of(k)
    local base = 4 + (i - 1) * 3
    local amount = num[base + 2]
    if k == 'R' or k == 'T' then
      amount = math.min(amount, num[base + 1] - out[i + 2])
    end
    if c == 'p' then
      -- A request's slot is counted once, however often it is admitted.
      if not h.vals[slot] then
        put(h, 'p', (tonumber(h.vals['p']) or 0) + 1)
      end
      put(h, slot, now_ms + ttl)
      live(h, slot_life)
    elseif amount > 0 then
      local f = c .. tick_name
      put(h, f, (tonumber(h.vals[f]) or 0) + amount)
      local sum = tonumber(h.vals[c .. '-1'])
      if sum == nil then
        -- A counter with nothing stored starts its bookkeeping here.
        put(h, c .. '-1', amount)
        put(h, c .. '-2', oldest)
        put(h, c .. '-3', tick)
      else
        put(h, c .. '-1', sum + amount)
      end
      live(h, window_life)
    end
  end
  return out
end

-- Adds `units` (negative: takes back) to bucket field f of counter c in h,
-- and to the sum while it is stored. A bucket never holds 0 or less: one
-- emptied is deleted; a bucket already gone (dropped from the window) has
-- nothing to give back.
local function add(h, c, f, units)
  local had = tonumber(h.vals[f])
  if units < 0 and had == nil then
    return
  end
  local left = (had or 0) + units
  if left <= 0 then
    units = -(had or 0)
    drop(h, f)
  else
    put(h, f, left)
  end
  local sum = tonumber(h.vals[c .. '-1'])
  if sum ~= nil then
    put(h, c .. '-1', sum + units)
  end
end

-- What settlement `op` does per entry: units back from the admission's
-- bucket (refunds) and units to the current bucket (charges); whether it
-- charges anything (and so needs the clock).
local function plan_finish(op)
  local num = op.num
  local used = num[3]
  op.refunds = {}
  op.charges = {}
  local charging = false
  for i = 1, op.nk do
    local k = string.sub(op.kinds, i, i)
    local reserved = num[3 + i]
    local refund = 0
    local charge = 0
    if k == 'p' then
      -- A slot: freed.
    elseif k == 'R' or k == 'T' then
      refund = reserved
      charge = used
    elseif used > reserved then
      charge = used - reserved
    else
      refund = reserved - used
    end
    op.refunds[i] = refund
    op.charges[i] = charge
    if charge > 0 then
      charging = true
    end
  end
  return charging
end

-- A settlement's fields, asked for before the batch runs.
local function ask_finish(op)
  for i = 1, op.nk do
    local h = hash_of(KEYS[op.k0 + i])
    local c = counter_of(string.sub(op.kinds, i, i))
    if c == 'p' then
      ask(h, 'p')
      ask(h, op.slot)
    else
      ask(h, c .. '-1')
      if op.refunds[i] > 0 then
        ask(h, c .. op.admitted)
      end
      if op.charges[i] > 0 then
        ask(h, c .. op.tick_name)
      end
    end
  end
end

-- Settles `op`: reservations become the real usage, slots are freed,
-- leases end; the reply.
local function finish(op)
  local num = op.num
  local g = num[1]
  local n = num[2]
  local slot = op.slot
  for i = 1, op.nk do
    local h = hash_of(KEYS[op.k0 + i])
    local c = counter_of(string.sub(op.kinds, i, i))
    if c == 'p' then
      if h.vals[slot] then
        drop(h, slot)
        local held = tonumber(h.vals['p']) or 1
        put(h, 'p', math.max(held - 1, 0))
      end
    else
      if op.refunds[i] > 0 then
        add(h, c, c .. op.admitted, -op.refunds[i])
      end
      if op.charges[i] > 0 then
        add(h, c, c .. op.tick_name, op.charges[i])
        live(h, (n + 1) * g)
      end
    end
  end
  return 1
end

-- The operations, read first so that every field they need is read at
-- once; the clock is read only when one needs it.
local letters = ARGV[1]
local ops = {}
local k = 0
local a = 2
local timed = false
for j = 1, #letters do
  local op
  if string.byte(letters, j) == 97 then -- 'a'
    local kinds = ARGV[a + 1]
    op = {admit = true, k0 = k, rid = ARGV[a], kinds = kinds, nk = #kinds}
    op.num = numbers(4 + 3 * op.nk, ARGV[a + 2])
    timed = true
    a = a + 3
  else
    local kinds = ARGV[a + 2]
    op = {admit = false, k0 = k, rid = ARGV[a], admitted = ARGV[a + 1], kinds = kinds, nk = #kinds}
    op.num = numbers(3 + op.nk, ARGV[a + 3])
    if plan_finish(op) then
      timed = true
    end
    a = a + 4
  end
  op.slot = 'p:' .. op.rid
  k = k + op.nk
  ops[j] = op
end
if timed then
  clock()
end
for _, op in ipairs(ops) do
  if now_s then
    op.tick = math.floor(now_s / op.num[1])
    op.tick_name = string.format('%d', op.tick)
  end
  if op.admit then
    ask_admit(op)
  else
    ask_finish(op)
  end
end
read()
local replies = {}
for j, op in ipairs(ops) do
  if op.admit then
    replies[j] = admit(op)
  else
    replies[j] = finish(op)
  end
end
for _, h in ipairs(view.list) do
  flush(h)
end
if #ops == 1 then
  return replies[1]
end
return replies
