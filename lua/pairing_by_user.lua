-- pairing_by_user: a pending pairing by user code (already normalised by Go:
-- trimmed, upper case), only while live (§6.3).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  by_user      pc:u, user code -> device code (lib/pairing.lua
--                       reads pc:d and pc:x from P)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  user_code    the user code
-- Reply: raw JSON or nil

local by_user = KEYS[1]
local user_code = ARGV[4]

local dc = redis.call('HGET', by_user, user_code)
if not dc then
  return false
end
return live_code(dc, clock())
