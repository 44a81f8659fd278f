-- cancel_requests: the cancelled jobs a runner currently holds, done jobs
-- included, in insertion order (§2.13). Pure read.
--
-- KEYS[1]  cxl:<eR>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  runnerId
-- Reply: flat {jobId, leaseId, ...}

local out = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = redis.call('HMGET', P .. 'j:' .. m, 'cx', 'cr', 'id', 'cl')
  if v[1] == '1' and v[2] == ARGV[4] and v[4] then
    out[#out + 1] = v[3]
    out[#out + 1] = v[4]
  end
end
return out
