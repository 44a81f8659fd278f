-- ops_churn: how many awaiting-payload timeouts each (site, owner) pair has
-- on record in its churn window, for the operations view. Pure read, O(1)
-- per pair. The pairs are one site's, so every key is on the site's shard
-- (internal/store/doc.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  churn:<eS>:<eO> of the first pair; KEYS[i] the i-th
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: {ZCARD of each key, in KEYS order}

local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('ZCARD', KEYS[i])
end
return out
