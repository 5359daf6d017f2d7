"""Measurement only: the current script's common-path redis.calls, no logic."""
from shipped import encode  # noqa: F401  (the unpacked protocol it was written for)
SCRIPT = """
local t = redis.call('TIME')
local n = #KEYS
-- settlement: t, p  (keys 1,2); admission r,t,p (keys 3,4,5) when 5 keys
local k = 0
if n == 5 then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HINCRBY', KEYS[1], '100', '-60')
  redis.call('HINCRBY', KEYS[1], '-1', '-60')
  k = 2
end
redis.call('HMGET', KEYS[k+1], '-1', '-2', '-3')
redis.call('HMGET', KEYS[k+2], '-1', '-2', '-3')
redis.call('ZCARD', KEYS[k+3])
redis.call('HINCRBY', KEYS[k+1], '100', '1')
redis.call('HINCRBY', KEYS[k+1], '-1', '1')
redis.call('HINCRBY', KEYS[k+2], '100', '120')
redis.call('HINCRBY', KEYS[k+2], '-1', '120')
redis.call('ZADD', KEYS[k+3], '1000000', ARGV[2])
redis.call('PEXPIRE', KEYS[k+3], '600000')
return 1
"""
