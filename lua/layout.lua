-- layout: read the namespace's layout record, or write it for a new
-- namespace; refuse a namespace written in the single-slot layout (v1).
--
-- Every key is fleet-wide ("<ns>:{<ns>}:"): one slot.
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  layout   HASH version, shards, salt (hex), v2 ("1": moved from
--                   layout v2 by relay migrate, so v2 state sets may remain)
-- KEYS[2..] keys only layout v1 wrote: seq, all, due, lease, pidx
-- ARGV[1..3] prefix, offset (unused), churn (unused)
-- ARGV[4]  version to write     ARGV[5]  shards to write   ARGV[6]  salt (hex)
-- Reply: {version, shards, salt, v2 ("0" or "1")}: the record (just written if there was none)
--      | {'v1', n}: no record, but n of the v1 keys exist; nothing written

local r = redis.call('HMGET', KEYS[1], 'version', 'shards', 'salt', 'v2')
if r[1] then
  r[4] = r[4] or '0'
  return r
end
local n = 0
for i = 2, #KEYS do
  n = n + redis.call('EXISTS', KEYS[i])
end
if n > 0 then
  return {'v1', n}
end
redis.call('HSET', KEYS[1], 'version', ARGV[4], 'shards', ARGV[5], 'salt', ARGV[6])
return {ARGV[4], ARGV[5], ARGV[6], '0'}
