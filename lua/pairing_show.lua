-- pairing_show: a pending pairing by user code (normalised by Go), with the
-- runner id it was approved as, if it was, for the admin approval page.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:u   KEYS[2]  pc:d   KEYS[3]  pc:x   KEYS[4]  pc:ok
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  userCode
-- Reply: {'live', pending (raw JSON), runnerId or ''} | {'expired'} (not
--   purged yet) | nil (unknown)

local dc = redis.call('HGET', KEYS[1], ARGV[4])
if not dc then
  return false
end
local pending = live_code(dc, clock())
if not pending then
  return {'expired'}
end
return {'live', pending, redis.call('HGET', KEYS[4], dc) or ''}
