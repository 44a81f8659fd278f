-- layout_move: move the namespace's layout record from one version to the
-- next, only if it still says the first (relay migrate, from v3 to v4; no
-- data moves: the stores of the new version read every record of the old).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  layout   HASH version, shards, salt, v2 (see layout.lua)
-- ARGV[1..3] prefix, offset (unused), churn (unused)
-- ARGV[4]  the version the record must say     ARGV[5]  the version to write
-- Reply: the version in force afterwards (nil: no record)

local v = redis.call('HGET', KEYS[1], 'version')
if v == ARGV[4] then
  redis.call('HSET', KEYS[1], 'version', ARGV[5])
  return ARGV[5]
end
return v
