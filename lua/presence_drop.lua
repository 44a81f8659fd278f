-- presence_drop: lose a record the way a shared store may (§2.17, tests),
-- with its owner-index and retention-index entries.
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  p:<eR>     KEYS[2]  pidx
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eR
-- Reply: 1

local owner = redis.call('HGET', KEYS[1], 'owner')
if owner then
  redis.call('SREM', P .. 'po:' .. b64url(owner), ARGV[4])
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('ZREM', P .. 'ls', ARGV[4])
return 1
