-- ops_device: the jobs a runner holds, for the operations view. Pure read,
-- bounded: the first ARGV[4] entries of held:<eR> in seq order, one HMGET
-- each; never a payload or result. It reads the current key layout
-- (internal/store/doc.go).
-- Read-only: runs with EVALSHA_RO (internal/store/opsview.go lists it).
--
-- KEYS[1]  held:<eR>  jobs R holds, done included
-- KEYS[2]  cxl:<eR>   cancelled jobs R holds
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  most held entries examined
-- Reply: {held (ZCARD), cancelled (ZCARD), then 4 strings per examined job
--         that is not done: site id, job id, state, lease expiry}

local out = {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
local page = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
for _, m in ipairs(page) do
  local v = redis.call('HMGET', P .. 'j:' .. m, 'state', 'site', 'id', 'ce')
  if v[1] and v[1] ~= 'done' then
    out[#out + 1] = v[2] or ''
    out[#out + 1] = v[3] or ''
    out[#out + 1] = v[1]
    out[#out + 1] = v[4] or ''
  end
end
return out
