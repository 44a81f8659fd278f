-- ops_device: the jobs a runner holds, for the operations view. Pure read,
-- bounded: the first ARGV[4] entries of hid:<eR> (by job id, then site),
-- one HMGET each; never a payload or result. A runner's hid and cxl sets
-- exist once per shard where it was granted jobs (internal/store/doc.go);
-- Go runs this on each shard of the runner's record rsh:<eR>, and only
-- those. hid holds every grant, done included (the bare-id probe needs
-- them).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  held        hid:<eR>   jobs R holds on this shard, done included: <eJ>:<eS>
-- KEYS[2]  cancelled   cxl:<eR>   cancelled jobs R holds on this shard
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  n           most held entries examined (0: none, only the counts)
-- Reply: {held (ZCARD), cancelled (ZCARD), entries examined, then 4 strings
--         per examined job that is not done: eS, eJ (encoded as in the
--         member; Go decodes them), state, lease expiry}

local held = KEYS[1]
local cancelled = KEYS[2]
local n = tonumber(ARGV[4])

local page = {}
if n > 0 then
  page = redis.call('ZRANGE', held, 0, n - 1)
end
local out = {redis.call('ZCARD', held), redis.call('ZCARD', cancelled), #page}
for _, member in ipairs(page) do
  local e_job, e_site = string.match(member, '^([^:]*):(.*)$')
  local v = redis.call('HMGET', P .. 'j:' .. e_site .. ':' .. e_job, 'state', 'ce')
  if v[1] and v[1] ~= 'done' then
    out[#out + 1] = e_site
    out[#out + 1] = e_job
    out[#out + 1] = v[1]
    out[#out + 1] = v[2] or ''
  end
end
return out
