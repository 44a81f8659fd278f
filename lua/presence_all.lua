-- presence_all: every record in insertion order (§2.16). Index entries whose
-- record is gone (TTL, drop) are skipped and removed (trap 35).
--
-- KEYS[1]  pidx
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: list of flat hashes

local out = {}
for _, e_runner in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local rec = redis.call('HGETALL', P .. 'p:' .. e_runner)
  if #rec == 0 then
    redis.call('ZREM', KEYS[1], e_runner)
  else
    out[#out + 1] = rec
  end
end
return out
