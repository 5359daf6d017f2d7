-- An admin set a principal's spend (`/key/update`, `/user/update` with
-- `spend`): its spend becomes ARGV[1] (nano-USD) and its per-model spend
-- starts over, as in Postgres; reservations in flight stay.
-- KEYS: the principal's hash.
local h = KEYS[1]
for _, f in ipairs(redis.call('HKEYS', h)) do
  if string.sub(f, -5) == 'spent' and string.sub(f, 1, 5) ~= 'hold:' then
    redis.call('HDEL', h, f)
  end
end
redis.call('HSET', h, 'spent', ARGV[1])
redis.call('PEXPIRE', h, 86400000)
return {1}
