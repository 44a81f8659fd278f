-- ops_site: one page of a site's live jobs split by state, for the
-- operations view (internal/opsview). Pure read, bounded: SSCAN of the
-- site's live set sl:<eS> (one set, never the keyspace) with COUNT ARGV[6],
-- one HMGET per member. It reads the sharded layout (internal/store/doc.go):
-- every key is the site's, on the site's shard.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  live        sl:<eS>   the site's live jobs (not done, not cancelled)
-- KEYS[2]  awaiting    aw:<eS>   its awaiting-payload index
-- KEYS[3]  finished    fin:<eS>  its done index
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_site
-- ARGV[5]  cursor      SSCAN cursor ("0" for the first page)
-- ARGV[6]  count       SSCAN COUNT hint
-- Reply: {next cursor ("0" when done), live (SCARD), awaiting (ZCARD),
--         done (ZCARD), examined, queued, ready, running, other,
--         oldest queued seq ("" when none), its eJ ("" when none; Go
--         decodes it)}

local live = KEYS[1]
local awaiting = KEYS[2]
local finished = KEYS[3]
local e_site = ARGV[4]
local cursor = ARGV[5]
local count = ARGV[6]

local r = redis.call('SSCAN', live, cursor, 'COUNT', tonumber(count))
local n = {queued = 0, ready = 0, running = 0, other = 0}
local oldSeq, oldID = nil, ''
for _, eJ in ipairs(r[2]) do
  local v = redis.call('HMGET', P .. 'j:' .. e_site .. ':' .. eJ, 'state', 'seq')
  local st = v[1]
  if st == 'queued' or st == 'ready' or st == 'running' then
    n[st] = n[st] + 1
  else
    n.other = n.other + 1
  end
  if st == 'queued' and v[2] then
    local seq = tonumber(v[2])
    if oldSeq == nil or seq < oldSeq then
      oldSeq, oldID = seq, eJ
    end
  end
end
local old = ''
if oldSeq ~= nil then
  old = string.format('%.0f', oldSeq)
end
return {r[1], redis.call('SCARD', live), redis.call('ZCARD', awaiting), redis.call('ZCARD', finished),
  #r[2], n.queued, n.ready, n.running, n.other, old, oldID}
