-- site_use: what each named site holds against its limits, for metrics.
-- Pure read, O(1) per site (SCARD, GET).
--
-- KEYS[1]  sl:<eS> of the first site (its live jobs, lib/store.lua)
-- KEYS[2]  sb:<eS> of the first site (its stored bytes, lib/store.lua)
-- KEYS[2i-1], KEYS[2i]: the same of the i-th site
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: {live jobs, stored bytes, ...} in KEYS order

local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('SCARD', KEYS[i])
  out[#out + 1] = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
end
return out
