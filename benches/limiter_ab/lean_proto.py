"""Measurement only: a lean hash-per-scope common path (rtp admission, tp settlement)."""
import struct

SCRIPT = r"""
local now_s, now_ms
local t = redis.call('TIME')
now_s = tonumber(t[1])
now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local ops = ARGV[1]
local replies = {}
local a = 2
for j = 1, #ops do
  local key = KEYS[j]
  local rid = ARGV[a]
  local num = {struct.unpack('<ddddddddddddd', ARGV[a + 2])}
  if string.byte(ops, j) == 97 then
    local g = num[1]
    local n = num[2]
    local tick = math.floor(now_s / g)
    local oldest = tick - n + 1
    local tn = string.format('%d', tick)
    local rf = 'r' .. tn
    local tf = 't' .. tn
    local slot = 'p:' .. rid
    local v = redis.call('HMGET', key, 'x', 'r-1', 'r-2', 'r-3', rf, 't-1', 't-2', 't-3', tf, 'p', slot)
    local rs = tonumber(v[2]) or 0
    local ts = tonumber(v[6]) or 0
    local p = tonumber(v[10]) or 0
    local low = tonumber(v[3])
    if rs + num[7] > num[5] then return {0, 1, rs, now_s + 1} end
    if ts + num[10] > num[8] then return {0, 2, ts, now_s + 1} end
    if p + num[13] > num[11] then return {0, 3, p, now_s + 1} end
    local ra = num[6]
    local ta = num[9]
    redis.call('HSET', key, rf, (tonumber(v[5]) or 0) + ra, 'r-1', rs + ra, tf, (tonumber(v[9]) or 0) + ta, 't-1', ts + ta, 'p', p + 1, slot, now_ms + num[3])
    if v[1] == false then
      redis.call('HSET', key, 'r-2', oldest, 'r-3', tick, 't-2', oldest, 't-3', tick, 'x', now_s + 120)
      redis.call('EXPIRE', key, 120)
    end
    replies[j] = {1, tick, rs, ts, p}
    a = a + 3
  else
    local adm = 't' .. ARGV[a + 1]
    local slot = 'p:' .. rid
    local used = num[3]
    local reserved = num[4]
    local v = redis.call('HMGET', key, 't-1', adm, 'p', slot)
    local back = reserved - used
    local b = tonumber(v[2])
    if v[4] then
      redis.call('HDEL', key, slot)
    end
    if b and back > 0 then
      redis.call('HSET', key, adm, b - back, 't-1', tonumber(v[1]) - back, 'p', (tonumber(v[3]) or 1) - 1)
    end
    replies[j] = 1
    a = a + 3
  end
end
if #ops == 1 then return replies[1] end
return replies
"""

G, N, TTL = 1, 61, 600000
RPM, TPM, PAR = 1_000_000, 100_000_000, 10_000
RESERVED, USED = 120, 60


def encode(ops):
    keys, argv, letters = [], [], b""
    for op, k, rid, tick, *_ in ops:
        keys.append(("{key:%d}" % k).encode())
        if op == "a":
            letters += b"a"
            nums = [G, N, TTL, 0, RPM, 1, 1, TPM, RESERVED, RESERVED, PAR, 1, 1]
            argv += [rid.encode(), b"rtp", struct.pack("<13d", *nums)]
        else:
            letters += b"f"
            nums = [G, N, USED, RESERVED, 1] + [0] * 8
            argv += [rid.encode(), b"%d" % tick, struct.pack("<13d", *nums)]
    return [b"%d" % len(keys)] + keys + [letters] + argv
