-- presence_drop: lose a record the way a shared store may (§2.17, tests).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  p:<eR>     KEYS[2]  pidx
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eR
-- Reply: 1

redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[4])
return 1
