-- ops_churn: how many awaiting-payload timeouts each (site, owner) pair has
-- on record in its churn window, for the operations view. Pure read, O(1)
-- per pair. It reads the current key layout (internal/store/doc.go).
-- Read-only: runs with EVALSHA_RO (internal/store/opsview.go lists it).
--
-- KEYS[1]  churn:<eS>:<eO> of the first pair; KEYS[i] the i-th
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: {ZCARD of each key, in KEYS order}

local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('ZCARD', KEYS[i])
end
return out
