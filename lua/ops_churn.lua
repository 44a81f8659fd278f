-- ops_churn: how many awaiting-payload timeouts each (site, owner) pair has
-- on record in its churn window, for the operations view. Pure read, O(1)
-- per pair. The pairs are one site's, so every key is on the site's shard
-- (internal/store/doc.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1..] pairs_asked  churn:<eS>:<eO> of each pair asked about
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- Reply: {ZCARD of each key, in KEYS order}

local pairs_asked = tail(KEYS, 1)

local out = {}
for i, key in ipairs(pairs_asked) do
  out[i] = redis.call('ZCARD', key)
end
return out
