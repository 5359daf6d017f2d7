"""Measurement only: settlement + admission of one scope merged into one read and one write."""
from lean_proto import encode  # noqa: F401

SCRIPT = r"""
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[#KEYS]
local a = #ARGV - 2
local rid = ARGV[a]
local num = {struct.unpack('<ddddddddddddd', ARGV[a + 2])}
local g = num[1]
local n = num[2]
local tick = math.floor(now_s / g)
local tn = string.format('%d', tick)
local rf = 'r' .. tn
local tf = 't' .. tn
local slot = 'p:' .. rid
local fslot = false
local back = 0
if #ARGV > 4 then
  fslot = 'p:' .. ARGV[2]
  local fn = {struct.unpack('<ddddddddddddd', ARGV[4])}
  back = fn[4] - fn[3]
end
local v = redis.call('HMGET', key, 'x', 'r-1', 'r-2', 'r-3', rf, 't-1', 't-2', 't-3', tf, 'p', slot, fslot or 'p:')
local rs = tonumber(v[2]) or 0
local ts = (tonumber(v[6]) or 0)
local tb = (tonumber(v[9]) or 0)
local p = tonumber(v[10]) or 0
if v[12] then
  p = p - 1
  ts = ts - back
  tb = tb - back
end
if rs + num[7] > num[5] then return {0, 1, rs, now_s + 1} end
if ts + num[10] > num[8] then return {0, 2, ts, now_s + 1} end
if p + num[13] > num[11] then return {0, 3, p, now_s + 1} end
local ra = num[6]
local ta = num[9]
redis.call('HSET', key, rf, (tonumber(v[5]) or 0) + ra, 'r-1', rs + ra, tf, tb + ta, 't-1', ts + ta, 'p', p + 1, slot, now_ms + num[3])
if v[12] then redis.call('HDEL', key, fslot) end
if v[1] == false then
  redis.call('HSET', key, 'r-2', tick - n + 1, 'r-3', tick, 't-2', tick - n + 1, 't-3', tick, 'x', now_s + 120)
  redis.call('EXPIRE', key, 120)
end
return {1, {1, tick, rs, ts, p}}
"""
