-- job: read one job by its full key (§2.3). Pure read: never settles.
-- lib: blob
-- lib: store
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  j:<eS>:<eJ>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  member <eS>:<eJ>
-- Reply: snapshot {flat hash, refusedBy, flat retryAfter}, or nil when absent

return snapshot(ARGV[4], false)
