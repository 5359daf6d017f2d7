-- The batch form of a batchable script (see grouped.rs): `one` above is
-- the script itself, run once per call, in order.
-- ARGV: n (runs), then for each run its key count and argument count, then
-- every run's arguments in order; KEYS: every run's keys in order.
-- Returns one reply per run: the script's own, or its error.
local n = tonumber(ARGV[1])
local out, k, a = {}, 0, 1 + 2 * n
for i = 1, n do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, args = {}, {}
  for j = 1, nk do
    keys[j] = KEYS[k + j]
  end
  for j = 1, na do
    args[j] = ARGV[a + j]
  end
  k, a = k + nk, a + na
  local ok, r = pcall(one, keys, args)
  if ok and r == nil then
    out[i] = false
  elseif ok then
    out[i] = r
  elseif type(r) == 'table' and r.err then
    out[i] = r
  else
    out[i] = redis.error_reply(tostring(r))
  end
end
return out
