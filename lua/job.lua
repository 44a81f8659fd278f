-- job: read one job by its full key (§2.3). Pure read: never settles.
-- lib: blob
-- lib: store
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  job         j:<eS>:<eJ>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  m           <eS>:<eJ>
-- Reply: snapshot {flat hash, refusedBy, flat retryAfter}, or nil when absent

local m = ARGV[4]

return snapshot(m, false)
