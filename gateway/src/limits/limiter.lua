-- The limiter's Redis side: a batch of operations in arrival order, each
-- all or none on its own. One call carries every admission and settlement
-- a link has ready (group commit), so what a call costs Redis besides its
-- operations (dispatch, arguments, the reply, the clock) is paid once per
-- batch, not once per request. Operations in a row on the same counters (a
-- busy key's batch) run on a copy of those counters read once and written
-- once (the run path, at the end), with the outcomes, replies and counters
-- of running them one by one.
-- The protocol is packed so that an operation costs Redis few arguments and
-- no table of its own:
-- ARGV[1]: one letter per operation, 'a' an admission, 'f' a settlement.
-- ARGV[2]: every number of the batch, little-endian doubles read with one
--   struct.unpack (Lua's tonumber, strtod, costs more than a redis.call's
--   overhead here): bucket_secs, buckets, slot_ttl_ms, then per operation
--   in turn, admission: expire_at_ms (the caller's deadline in Redis time,
--   0 for none), then per key limit, amount, need (units that must fit);
--   settlement: tokens_used (units spent, for a lease), then per key
--   reserved (granted, for a lease); for a parallel key, the slots its set
--   held when this slot was taken plus one (the admission's `used` + 1),
--   which tells the slot's form (see PAD), or 0 when not known (a slot
--   whose admission got no reply): both forms are removed then.
-- ARGV[3]: slot_ttl_ms in decimal.
-- Each operation then takes its keys from KEYS in turn (as many as its
-- kinds argument has letters) and its arguments from ARGV in turn:
--   admission: the kinds, one letter per key ('r' requests, 't' tokens, 'p'
--     parallel, 'l' a lease of rpm or tpm units); request_id; per key the
--     amount in decimal (what redis.call is given, see below).
--   settlement: the kinds ('t', 'p' or 'l'); request_id; admitted_tick in
--     decimal.
--   request_id is the request's parallel slots' member, padded (PAD) when
--   the set already holds BIG slots, see below; the admission's reply
--   (`used`) tells the caller which form it took.
-- Returns one flat array of integers, each operation's reply in turn (the
-- caller knows where each ends from its first integer and its keys):
--   admission: 1, tick, used_1, ..., used_n; 0, index, used, reset_at; or
--     2 when run after the caller's deadline (a call that waited in a
--     frozen server or a lost connection): nothing is charged, as nobody
--     waits for it;
--   settlement: 1.
-- Admission: a lease charges min(amount, limit - used): the whole lease
-- when it fits, what is left otherwise; the caller computes the same from
-- `used`.
-- Settlement: token reservations become the real usage, parallel slots are
-- freed. It also ends a lease (one key, kind 'l'): its grant leaves the
-- bucket it was charged in and what was spent of it is charged again now,
-- so each spent unit stays counted a full window after it was spent.
-- Time is the Redis server's, read at most once per batch. rpm/tpm counters are
-- hashes of bucket -> units (the sliding window of window.rs) with three
-- bookkeeping fields named by negative numbers (no bucket is negative):
-- '-1' the sum of every bucket present, '-2' the lowest bucket that may
-- still be present, '-3' the bucket at which the sum was last recomputed
-- from the buckets. So a check reads two or three fields instead of summing
-- up to 61 buckets, drops the buckets that left the window as it goes, and
-- recomputes the sum once a window (or whenever a field is missing), which
-- heals any drift. Every change to a bucket changes the sum by as much.
-- Parallel counters are sorted sets of request ids scored by their expiry,
-- so a crashed replica's slots lapse: they are dropped when the set looks
-- full (one ZCARD otherwise, not a ZREMRANGEBYSCORE per admission).
-- A set of up to 128 members of up to 64 bytes is a listpack, which ZADD
-- and ZREM walk member by member (23,000 instructions a member added at
-- 32-80 slots held): a slot taken while the set holds BIG or more is the
-- request id padded past 64 bytes (PAD), which makes the set a skip list
-- and a hash table (O(log n) and O(1), about 3,000) until it empties. A
-- set of a few slots stays a listpack (about 100 bytes a set, against
-- 1,000 as a skip list). A settlement removes the form its admission
-- took (known from the reply's `used`), both when that is not known: a
-- form absent from a listpack costs a walk of the whole set.
-- (Key names and fields are those of the unpacked protocol before it, so
-- replicas running either script share the same counters.)
-- Globals and library functions as locals: naming a global costs a table
-- look-up each time (two for `string.format`), a local or upvalue none.
local KEYS, ARGV = KEYS, ARGV
local call = redis.call
local format, byte, sub, find = string.format, string.byte, string.sub, string.find
local floor, min = math.floor, math.min
local tonumber, unpack = tonumber, unpack
-- See "A set of up to 128 members" above.
local BIG = 32
local PAD = '|' .. string.rep('~', 64)

-- Redis's clock, read once per batch and only when an operation needs it
-- (a settlement that only refunds or frees slots does not).
local now_s = nil
local now_ms = nil
local function clock()
  if now_s == nil then
    -- redis.call by name: benches/limiter_ab/diff.py swaps this line for
    -- its fake clock.
    local t = redis.call('TIME')
    now_s = tonumber(t[1])
    now_ms = now_s * 1000 + floor(tonumber(t[2]) / 1000)
  end
end

-- Recomputes a counter's sum from its live buckets, deleting the dead ones;
-- nil when the counter has no bucket (nothing is written then, so no key is
-- left without an expiry).
local function recount(key, tick, oldest)
  local kv = call('HGETALL', key)
  local sum = 0
  local buckets = 0
  local dead = {}
  for j = 1, #kv, 2 do
    local b = tonumber(kv[j])
    if b < 0 then
      -- A bookkeeping field.
    elseif b < oldest then
      dead[#dead + 1] = kv[j]
    else
      sum = sum + tonumber(kv[j + 1])
      buckets = buckets + 1
    end
  end
  if #dead > 0 then
    call('HDEL', key, unpack(dead))
  end
  if buckets == 0 then
    if #kv > 0 then
      call('DEL', key)
    end
    return nil
  end
  call('HSET', key, '-1', format('%d', sum), '-2', format('%d', oldest),
    '-3', format('%d', tick))
  return sum
end

-- The units a counter holds in the window; nil when it has none stored.
-- When buckets left the window since the counter's last check, also the
-- names of those present: the caller deletes them and writes the new sum
-- and lowest bucket with its charge, in one HSET (or writes nothing when
-- the admission is refused: the hash then stays as it was, its old sum
-- still matching its buckets). Third, the units of the current bucket
-- (`tick_name`), read with the sum so that the caller writes the charged
-- bucket and the sum in one HSET: nil when the bucket is absent, false
-- when not read (the counter was recounted). Bucket names go to
-- redis.call as decimal strings: Redis formats a Lua number with
-- snprintf("%.17g").
local function window_sum(key, tick, oldest, n, tick_name)
  local f = call('HMGET', key, '-1', '-2', '-3', tick_name)
  local sum = tonumber(f[1])
  local low = tonumber(f[2])
  local counted = tonumber(f[3])
  if sum == nil or low == nil or counted == nil or tick - counted >= n or oldest - low > n then
    return recount(key, tick, oldest), nil, false
  end
  local cur = tonumber(f[4])
  if low < oldest then
    local gone = {}
    for b = low, oldest - 1 do
      gone[#gone + 1] = format('%d', b)
    end
    local values = call('HMGET', key, unpack(gone))
    local dropped = {}
    for j = 1, #gone do
      if values[j] then
        sum = sum - tonumber(values[j])
        dropped[#dropped + 1] = gone[j]
      end
    end
    return sum, dropped, cur
  end
  return sum, nil, cur
end

-- The unix second at which a refused counter's oldest unit stops counting.
local function reset_of(key, oldest, n, g)
  local kv = call('HGETALL', key)
  local first = nil
  for j = 1, #kv, 2 do
    local b = tonumber(kv[j])
    if b >= oldest and tonumber(kv[j + 1]) > 0 and (first == nil or b < first) then
      first = b
    end
  end
  if first == nil then
    return now_s + 1
  end
  return (first + n) * g
end

-- A slot's member when its set holds `held` slots: the request id, padded
-- from BIG held (see "A set of up to 128 members" above).
local function slot_member(rid, held)
  if held >= BIG then
    return rid .. PAD
  end
  return rid
end

-- The members a settlement removes from a parallel set: the one its
-- admission took (`seen`: the slots the set held then, plus one), or both
-- forms when `seen` is 0 (not known).
local function slot_forms(rid, seen)
  if seen == 0 then
    return rid, rid .. PAD
  end
  return slot_member(rid, seen - 1)
end

-- Every number of the batch (ARGV[2]), read with one struct.unpack when
-- they fit Lua's stack, in parts otherwise (a long batch).
local N
do
  local blob = ARGV[2]
  local count = #blob / 8
  if count <= 4000 then
    N = {struct.unpack('<' .. string.rep('d', count), blob)}
  else
    N = {}
    local pos = 1
    local done = 0
    while done < count do
      local c = min(4000, count - done)
      local part = {struct.unpack('<' .. string.rep('d', c), blob, pos)}
      for j = 1, c do
        N[done + j] = part[j]
      end
      pos = part[c + 1]
      done = done + c
    end
  end
end
-- The window (bucket_secs, buckets) and a parallel slot's lifetime, the
-- same for every operation of a batch.
local G = N[1]
local NB = N[2]
local TTL = N[3]
local TTL_ARG = ARGV[3]

-- The batch's bucket, its name in decimal, the oldest bucket of the window
-- and a new counter's lifetime in decimal: the same for every operation of
-- a batch (one clock reading, one window), worked out once, after the
-- clock is read.
local b_tick, b_name, b_oldest, b_life
local function bucket()
  if b_tick == nil then
    b_tick = floor(now_s / G)
    b_name = format('%d', b_tick)
    b_oldest = b_tick - NB + 1
    b_life = format('%d', (NB + 1) * G)
  end
  return b_tick, b_name, b_oldest, b_life
end

-- A slot's score (its expiry) in decimal, the same for every slot the
-- batch takes: formatted once, on first use, after the clock is read.
local slot_score = nil
local function score()
  if slot_score == nil then
    slot_score = format('%d', now_ms + TTL)
  end
  return slot_score
end
-- The reply: every operation's integers in turn.
local R = {}

-- Each window counter's units in the current bucket as its admission read
-- them (see window_sum), by the counter's place in the admission; reused
-- by every admission of the batch.
local CUR = {}

-- Whether KEYS[k0 + i] is also an earlier counter of the same admission.
local function repeated(k0, i)
  local key = KEYS[k0 + i]
  for j = 1, i - 1 do
    if KEYS[k0 + j] == key then
      return true
    end
  end
  return false
end

-- Checks and charges the `nk` counters KEYS[k0 + 1 ..] with the arguments
-- from ARGV[a0] and the numbers from N[d + 4] (d + 1 .. d + 3 standing for
-- the batch's window and slot lifetime); its reply goes to R after R[r].
-- Returns the reply's new length.
local function admit(k0, a0, d, r, nk)
  local kinds = ARGV[a0]
  local rid = ARGV[a0 + 1]
  local g = G
  local n = NB
  local expire_at = N[d + 4]
  clock()
  if expire_at > 0 and now_ms > expire_at then
    R[r + 1] = 2
    return r + 1
  end
  local tick, tick_name, oldest, life = bucket()
  -- The reply, holding each counter's usage as it is checked. The tables
  -- of counters found without a stored sum and of counters created here
  -- are made only when needed: each table costs Redis as much as a few
  -- hundred bytecodes.
  R[r + 1] = 1
  R[r + 2] = tick
  local unstored = nil
  local created = nil
  -- Counters whose window moved on, by key: the buckets to delete.
  local moved = nil
  for i = 1, nk do
    local key = KEYS[k0 + i]
    local base = 4 + (i - 1) * 3
    local kind = sub(kinds, i, i)
    local limit = N[d + base + 1]
    local need = N[d + base + 3]
    if need < 1 then need = 1 end
    local u = 0
    if kind == 'p' then
      u = call('ZCARD', key)
      if u + need > limit then
        -- lapsed slots (a crashed replica's) may be what fills it: they go
        -- only now, as only then can they change the verdict
        call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
        u = call('ZCARD', key)
      end
    else
      local sum, dropped, cur = window_sum(key, tick, oldest, n, tick_name)
      CUR[i] = cur
      if dropped then
        moved = moved or {}
        moved[key] = dropped
      end
      if sum == nil then
        unstored = unstored or {}
        unstored[i] = true
        sum = 0
      end
      u = sum
    end
    if u + need > limit then
      local reset = now_s + 1
      if kind ~= 'p' then
        reset = reset_of(key, oldest, n, g)
      end
      R[r + 1] = 0
      R[r + 2] = i
      R[r + 3] = u
      R[r + 4] = reset
      return r + 4
    end
    R[r + 2 + i] = u
  end
  -- Arguments go to redis.call as strings where they can: Redis formats a
  -- Lua number with snprintf("%.17g"), which costs about a third of a
  -- redis.call. The bucket's name is formatted once; an amount passed as it
  -- came is the caller's decimal integer. A counter whose bucket was read
  -- with its sum (CUR) gets both written in one HSET, unless an earlier
  -- counter of this admission is on the same key (what it read is stale).
  for i = 1, nk do
    local key = KEYS[k0 + i]
    local base = 4 + (i - 1) * 3
    local kind = sub(kinds, i, i)
    local amount_arg = ARGV[a0 + 1 + i]
    local amount = N[d + base + 2]
    if kind == 'l' then
      amount = min(amount, N[d + base + 1] - R[r + 2 + i])
      amount_arg = amount
    end
    local dropped = moved and moved[key]
    if kind == 'p' then
      call('ZADD', key, score(), slot_member(rid, R[r + 2 + i]))
      call('PEXPIRE', key, TTL_ARG)
    elseif dropped then
      -- The window moved on: the buckets that left it go, and the sum
      -- (less them, plus this charge) and the lowest bucket are written
      -- in one HSET. A second counter on the same key in this admission
      -- finds the move written and charges as usual.
      moved[key] = nil
      if #dropped > 0 then
        call('HDEL', key, unpack(dropped))
      end
      local sum = R[r + 2 + i]
      local cur = CUR[i]
      if amount > 0 then
        sum = sum + amount
      end
      if amount > 0 and cur ~= false then
        call('HSET', key, tick_name, format('%d', (cur or 0) + amount), '-1',
          format('%d', sum), '-2', format('%d', oldest))
        if cur == nil then
          call('EXPIRE', key, life)
        end
      else
        if amount > 0 and call('HINCRBY', key, tick_name, amount_arg) == amount then
          call('EXPIRE', key, life)
        end
        call('HSET', key, '-1', format('%d', sum), '-2', format('%d', oldest))
      end
    elseif amount > 0 then
      local cur = CUR[i]
      if cur ~= false and not (unstored and unstored[i]) and not repeated(k0, i) then
        -- The common case: bucket and sum as read, plus the charge.
        call('HSET', key, tick_name, format('%d', (cur or 0) + amount), '-1',
          format('%d', R[r + 2 + i] + amount))
        if cur == nil then
          call('EXPIRE', key, life)
        end
      elseif not (unstored and unstored[i]) or (created and created[key]) then
        -- The key lives while its newest bucket does: its expiry moves only
        -- when a bucket is created.
        if call('HINCRBY', key, tick_name, amount_arg) == amount then
          call('EXPIRE', key, life)
        end
        call('HINCRBY', key, '-1', amount_arg)
      else
        call('HSET', key, tick_name, amount_arg, '-1', amount_arg, '-2',
          format('%d', oldest), '-3', tick_name)
        call('EXPIRE', key, life)
        created = created or {}
        created[key] = true
      end
    end
  end
  return r + 2 + nk
end

-- Adds `units` to the current bucket (and the sum) of a counter; the
-- key's expiry moves when the bucket is new.
local function charge(key, units)
  clock()
  local _, tick, _, life = bucket()
  local units_arg = format('%d', units)
  if call('HINCRBY', key, tick, units_arg) == units then
    call('EXPIRE', key, life)
  end
  call('HINCRBY', key, '-1', units_arg)
end

-- Takes `units` back from the admission's bucket (and from the sum) while
-- the bucket is there, deleting it when nothing is left in it. A bucket
-- present is counted in the sum, live or not yet dropped; one already
-- dropped has nothing to give back. Buckets never hold 0 or less, so a
-- result of exactly -units means the bucket was absent.
local function refund(key, admitted, units)
  if units <= 0 then
    return
  end
  local down = format('%d', -units)
  local left = call('HINCRBY', key, admitted, down)
  if left == -units then
    call('HDEL', key, admitted)
    return
  end
  if left <= 0 then
    call('HDEL', key, admitted)
    down = format('%d', -(units + left))
  end
  call('HINCRBY', key, '-1', down)
end

-- Ends a lease on a window counter: its grant (`units`) leaves bucket
-- `admitted` while that bucket is there, and what was spent (`used`) is
-- charged to the current bucket, the sum moved by both, as refund then
-- charge do, but read with one HMGET and written with one HSET (an HDEL
-- when the grant's bucket empties, an EXPIRE when the current bucket is
-- new) instead of a HINCRBY for each bucket and each change of the sum.
-- A counter without a stored sum takes refund and charge.
local function end_lease(key, admitted, units, used)
  if used <= 0 then
    refund(key, admitted, units)
    return
  end
  clock()
  local _, tick, _, life = bucket()
  local f = call('HMGET', key, '-1', admitted, tick)
  local sum = tonumber(f[1])
  if sum == nil then
    refund(key, admitted, units)
    charge(key, used)
    return
  end
  local b0 = tonumber(f[2])
  local cur = tonumber(f[3])
  local writes = {}
  local emptied = false
  if units > 0 and b0 ~= nil then
    if b0 > units then
      b0 = b0 - units
      sum = sum - units
      writes[1] = admitted
      writes[2] = format('%d', b0)
    else
      sum = sum - b0
      b0 = nil
      emptied = true
    end
    if admitted == tick then
      cur = b0
    end
  end
  -- The current bucket's pair comes last: when it is the grant's bucket,
  -- HSET keeps the last value given for a field.
  writes[#writes + 1] = tick
  writes[#writes + 1] = format('%d', (cur or 0) + used)
  writes[#writes + 1] = '-1'
  writes[#writes + 1] = format('%d', sum + used)
  call('HSET', key, unpack(writes))
  if emptied and admitted ~= tick then
    call('HDEL', key, admitted)
  end
  if cur == nil then
    call('EXPIRE', key, life)
  end
end

-- Settles the `nk` counters KEYS[k0 + 1 ..] with the arguments from
-- ARGV[a0] and the numbers from N[d + 3] (d + 1, d + 2 standing for the
-- batch's window).
local function finish(k0, a0, d, nk)
  local kinds = ARGV[a0]
  local rid = ARGV[a0 + 1]
  local admitted = ARGV[a0 + 2]
  local used = N[d + 3]
  for i = 1, nk do
    local key = KEYS[k0 + i]
    local kind = sub(kinds, i, i)
    local reserved = N[d + 3 + i]
    if kind == 'p' then
      call('ZREM', key, slot_forms(rid, reserved))
    elseif kind == 'l' then
      end_lease(key, admitted, reserved, used)
    else
      local delta = used - reserved
      if delta > 0 then
        charge(key, delta)
      elseif delta < 0 then
        refund(key, admitted, -delta)
      end
    end
  end
end

-- The run path. A busy key's batch carries many operations on the same
-- counters; evaluated one by one, each re-reads and re-writes every counter
-- with its own redis.calls. Instead, counters an admission finds in their
-- common state (stored sum, window not moved on, no recount due) are read
-- once into `cache` and later operations on them (admissions, settlements
-- of 't', 'r' and 'p') change that copy; each counter is written once when
-- the run ends (`flush`): before an operation that must take the general
-- path on a cached key, and after the batch. Anything the copy cannot
-- decide exactly (a refusal, lapsed slots, a lease, another window) ends
-- the run and takes the general path, so outcomes, replies and counters are
-- those of evaluating the operations one by one.
local cache = nil
local order = nil
local run_tick, run_oldest, run_tn, run_life

local function flush()
  if cache == nil then
    return
  end
  for j = 1, #order do
    local key = order[j]
    local c = cache[key]
    if c.w then
      if c.dirty then
        local set = {'-1', format('%d', c.s)}
        local gone = nil
        if c.cur then
          set[3] = run_tn
          set[4] = format('%d', c.cur)
        elseif c.had then
          gone = {run_tn}
        end
        -- Older buckets given back in the run: what is left of each, or
        -- deleted when emptied.
        local olds = c.olds
        if olds then
          for x = 1, #olds do
            local v = c.old[olds[x]]
            if v == 0 then
              gone = gone or {}
              gone[#gone + 1] = olds[x]
            elseif v then
              set[#set + 1] = olds[x]
              set[#set + 1] = format('%d', v)
            end
          end
        end
        call('HSET', key, unpack(set))
        if gone then
          call('HDEL', key, unpack(gone))
        end
        if c.created then
          call('EXPIRE', key, run_life)
        end
      end
    else
      if c.nrem > 0 then
        c.z = c.z - call('ZREM', key, unpack(c.rems, 1, c.nrem))
      end
      if c.nadd > 0 then
        -- Slots freed in the run are false: squeezed out.
        local adds = c.adds
        local m = 0
        for x = 1, c.nadd, 2 do
          if adds[x + 1] then
            adds[m + 1] = adds[x]
            adds[m + 2] = adds[x + 1]
            m = m + 2
          end
        end
        if m > 0 then
          call('ZADD', key, unpack(adds, 1, m))
        end
        -- Each admission moved the expiry; an empty set has no key.
        if c.ttl and c.z > 0 then
          call('PEXPIRE', key, c.ttl)
        end
      end
    end
  end
  cache = nil
  order = nil
end

-- An admission on the run (its arguments as admit's); the reply's new
-- length, or nil when it must take the general path (having changed
-- nothing but R past R[r], which that path writes again).
local function admit_run(k0, a0, d, r, nk)
  local kinds = ARGV[a0]
  if find(kinds, 'l', 1, true) then
    return nil
  end
  local expire_at = N[d + 4]
  clock()
  if expire_at > 0 and now_ms > expire_at then
    R[r + 1] = 2
    return r + 1
  end
  if cache == nil then
    cache = {}
    order = {}
    run_tick, run_tn, run_oldest, run_life = bucket()
  end
  R[r + 1] = 1
  R[r + 2] = run_tick
  for i = 1, nk do
    local key = KEYS[k0 + i]
    local par = byte(kinds, i) == 112
    local c = cache[key]
    if c == nil then
      if par then
        c = {w = false, z = call('ZCARD', key), nrem = 0, nadd = 0}
      else
        -- A window counter joins the run in its common state only.
        local f = call('HMGET', key, '-1', '-2', '-3', run_tn)
        local sum = tonumber(f[1])
        local low = tonumber(f[2])
        local counted = tonumber(f[3])
        if sum == nil or low == nil or counted == nil or run_tick - counted >= NB
            or low < run_oldest then
          return nil
        end
        local cur = tonumber(f[4])
        c = {w = true, s = sum, cur = cur, had = cur ~= nil, dirty = false, created = false}
      end
      cache[key] = c
      order[#order + 1] = key
    elseif par == c.w then
      return nil
    end
    local base = 4 + (i - 1) * 3
    local need = N[d + base + 3]
    if need < 1 then need = 1 end
    local u
    if par then
      -- Its count made exact: the slots freed since are removed first.
      if c.nrem > 0 then
        c.z = c.z - call('ZREM', key, unpack(c.rems, 1, c.nrem))
        c.rems = nil
        c.nrem = 0
      end
      u = c.z
    else
      u = c.s
    end
    if u + need > N[d + base + 1] then
      return nil
    end
    R[r + 2 + i] = u
  end
  for i = 1, nk do
    local c = cache[KEYS[k0 + i]]
    if c.w then
      local amount = N[d + 4 + (i - 1) * 3 + 2]
      if amount > 0 then
        local prev = c.cur
        if prev == nil then
          c.created = true
          c.cur = amount
        else
          c.cur = prev + amount
        end
        c.s = c.s + amount
        c.dirty = true
      end
    else
      local adds = c.adds
      if adds == nil then
        adds = {}
        c.adds = adds
      end
      adds[c.nadd + 1] = score()
      adds[c.nadd + 2] = slot_member(ARGV[a0 + 1], c.z)
      c.nadd = c.nadd + 2
      c.z = c.z + 1
      c.ttl = TTL_ARG
    end
  end
  return r + 2 + nk
end

-- A settlement on the run (its arguments as finish's); false when it must
-- take the general path (having changed nothing).
local function finish_run(k0, a0, d, nk)
  if cache == nil then
    return false
  end
  local kinds = ARGV[a0]
  for i = 1, nk do
    local c = cache[KEYS[k0 + i]]
    local kind = byte(kinds, i)
    if c == nil or kind == 108 or (kind == 112) == c.w then
      return false
    end
  end
  local rid = ARGV[a0 + 1]
  local admitted = ARGV[a0 + 2]
  local used = N[d + 3]
  for i = 1, nk do
    local key = KEYS[k0 + i]
    local c = cache[key]
    if not c.w then
      -- A slot taken in this run is freed in the copy (its last taking:
      -- ZADD then ZREM leaves nothing); every freed slot also goes to the
      -- ZREM written before the run's ZADD (a slot held from before the
      -- run and taken again in it is removed as ZREM would).
      local m1, m2 = slot_forms(rid, N[d + 3 + i])
      local adds = c.adds
      local x = c.nadd
      while x > 0 and adds[x] ~= m1 and adds[x] ~= m2 do
        x = x - 2
      end
      if x > 0 then
        adds[x] = false
        c.z = c.z - 1
      end
      local rems = c.rems
      if rems == nil then
        rems = {}
        c.rems = rems
      end
      local nrem = c.nrem + 1
      rems[nrem] = m1
      if m2 then
        nrem = nrem + 1
        rems[nrem] = m2
      end
      c.nrem = nrem
    else
      local delta = used - N[d + 3 + i]
      if delta > 0 then
        local prev = c.cur
        if prev == nil then
          c.created = true
          c.cur = delta
        else
          c.cur = prev + delta
        end
        c.s = c.s + delta
        c.dirty = true
      elseif delta < 0 then
        local units = -delta
        if admitted == run_tn then
          local prev = c.cur
          if prev ~= nil then
            if prev <= units then
              c.s = c.s - prev
              c.cur = nil
            else
              c.cur = prev - units
              c.s = c.s - units
            end
            c.dirty = true
          end
        else
          -- An older bucket (a request that took longer than a bucket, as
          -- most LLM calls do): read once a run into the copy (its units;
          -- false when absent, 0 once emptied: either has nothing to give
          -- back), taken back there, written by flush.
          local old = c.old
          if old == nil then
            old = {}
            c.old = old
            c.olds = {}
          end
          local v = old[admitted]
          if v == nil then
            v = tonumber(call('HGET', key, admitted)) or false
            old[admitted] = v
            c.olds[#c.olds + 1] = admitted
          end
          if v and v > 0 then
            if v <= units then
              units = v
            end
            old[admitted] = v - units
            c.s = c.s - units
            c.dirty = true
          end
        end
      end
    end
  end
  return true
end

-- Flushes the run when any of the `nk` keys from KEYS[k0 + 1] is in it.
local function flush_if_cached(k0, nk)
  if cache ~= nil then
    for i = 1, nk do
      if cache[KEYS[k0 + i]] then
        flush()
        return
      end
    end
  end
end

local ops = ARGV[1]
local nops = #ops
local r = 0
local k = 0
local a = 4
-- The operation's first number is N[p] (the batch's window and slot
-- lifetime come first, at N[1 .. 3]).
local p = 4
for j = 1, nops do
  local nk = #ARGV[a]
  if byte(ops, j) == 97 then -- 'a'
    -- An admission opens a run (or joins it) when the run holds its first
    -- key or the next operation shares a key with it.
    local r2 = nil
    local join = cache ~= nil and cache[KEYS[k + 1]] ~= nil
    if not join and j < nops then
      local nk2 = #ARGV[a + 2 + nk]
      for x = k + nk + 1, k + nk + nk2 do
        local kx = KEYS[x]
        for i = k + 1, k + nk do
          if kx == KEYS[i] then
            join = true
          end
        end
      end
    end
    if join then
      r2 = admit_run(k, a, p - 4, r, nk)
    end
    if r2 == nil then
      flush_if_cached(k, nk)
      r2 = admit(k, a, p - 4, r, nk)
    end
    r = r2
    a = a + 2 + nk
    p = p + 1 + 3 * nk
  else
    if not finish_run(k, a, p - 3, nk) then
      flush_if_cached(k, nk)
      finish(k, a, p - 3, nk)
    end
    r = r + 1
    R[r] = 1
    a = a + 3
    p = p + 1 + nk
  end
  k = k + nk
end
flush()
-- A refusal or an expired admission may leave integers of its own past
-- the reply's end (written before it knew); the reply ends at the first nil.
R[r + 1] = nil
return R
