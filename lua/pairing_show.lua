-- pairing_show: a pending pairing by user code (normalised by Go), with the
-- runner id it was approved as, if it was, for the admin approval page.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  by_user      pc:u, user code -> device code (lib/pairing.lua
--                       reads pc:d and pc:x from P)
-- KEYS[2]  approved     pc:ok, device code -> the runner id it was approved as
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  user_code    the user code (normalised)
-- Reply: {'live', pending (raw JSON), runnerId or ''} | {'expired'} (not
--   purged yet) | nil (unknown)

local by_user = KEYS[1]
local approved = KEYS[2]
local user_code = ARGV[4]

local dc = redis.call('HGET', by_user, user_code)
if not dc then
  return false
end
local pending = live_code(dc, clock())
if not pending then
  return {'expired'}
end
return {'live', pending, redis.call('HGET', approved, dc) or ''}
