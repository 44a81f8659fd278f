-- pairing_deny: drop a live pending pairing by its user code, so the
-- daemon's next poll answers "expired" (the wire has no "denied" answer the
-- relay sends, §8.1). An approved code is left alone: its device is already
-- in the projection, and dropping the code would only hide that from the
-- daemon.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  by_user      pc:u, user code -> device code (lib/pairing.lua
--                       reads pc:d and pc:x from P)
-- KEYS[2]  approved     pc:ok, device code -> the runner id it was approved as
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  user_code    the user code (normalised)
-- Reply: {'denied'} | {'unknown'} | {'expired'} (not purged yet) |
--   {'approved', runnerId}

local by_user = KEYS[1]
local approved = KEYS[2]
local user_code = ARGV[4]

local dc = redis.call('HGET', by_user, user_code)
if not dc then
  return {'unknown'}
end
if not live_code(dc, clock()) then
  return {'expired'}
end
local already = redis.call('HGET', approved, dc)
if already then
  return {'approved', already}
end
remove_code(dc)
return {'denied'}
