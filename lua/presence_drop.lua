-- presence_drop: lose a record the way a shared store may (§2.17, tests),
-- with its owner-index and retention-index entries.
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  record      p:<eR>
-- KEYS[2]  index
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_runner
-- Reply: 1

local record = KEYS[1]
local index = KEYS[2]
local e_runner = ARGV[4]

local owner = redis.call('HGET', record, 'owner')
if owner then
  redis.call('SREM', P .. 'po:' .. b64url(owner), e_runner)
end
redis.call('DEL', record)
redis.call('ZREM', index, e_runner)
redis.call('ZREM', P .. 'ls', e_runner)
return 1
