-- presence_head: one runner's record without its capabilities and withheld
-- lists: what authenticating a daemon needs (owner, device key set), never
-- the lists a runner advertised, so a heartbeat does not carry them back
-- from Valkey. Pure read; lastSeenAt unchanged.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  p:<eR>
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: flat hash of runnerId, owner, device, lastSeenAt; empty when there
--        is no record

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local r = redis.call('HMGET', KEYS[1], 'runnerId', 'owner', 'device', 'lastSeenAt')
return {'runnerId', r[1], 'owner', r[2], 'device', r[3], 'lastSeenAt', r[4]}
