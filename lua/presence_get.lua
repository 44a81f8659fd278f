-- presence_get: one runner's record (§2.16). Pure read; lastSeenAt unchanged.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  record      p:<eR>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- Reply: flat hash, empty when there is no record

local record = KEYS[1]

return redis.call('HGETALL', record)
