-- presence_get: one runner's record (§2.16). Pure read; lastSeenAt unchanged.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  p:<eR>
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: flat hash, empty when there is no record

return redis.call('HGETALL', KEYS[1])
