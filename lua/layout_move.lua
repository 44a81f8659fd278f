-- layout_move: move the namespace's layout record from one version to the
-- next, only if it still says the first (relay migrate, after the step
-- that moved the data: internal/layout layout.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  layout      HASH version, shards, salt (see layout.lua)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  from        the version the record must say
-- ARGV[5]  to          the version to write
-- Reply: the version in force afterwards (nil: no record)

local layout = KEYS[1]
local from = ARGV[4]
local to = ARGV[5]

local v = redis.call('HGET', layout, 'version')
if v == from then
  redis.call('HSET', layout, 'version', to)
  return to
end
return v
