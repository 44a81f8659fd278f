-- pairing_deny: drop a live pending pairing by its user code, so the
-- daemon's next poll answers "expired" (the wire has no "denied" answer the
-- relay sends, §8.1). An approved code is left alone: its device is already
-- in the projection, and dropping the code would only hide that from the
-- daemon.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:u   KEYS[2]  pc:d   KEYS[3]  pc:x   KEYS[4]  pc:ok
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  userCode (normalised)
-- Reply: {'denied'} | {'unknown'} | {'expired'} (not purged yet) |
--   {'approved', runnerId}

local dc = redis.call('HGET', KEYS[1], ARGV[4])
if not dc then
  return {'unknown'}
end
if not live_code(dc, clock()) then
  return {'expired'}
end
local already = redis.call('HGET', KEYS[4], dc)
if already then
  return {'approved', already}
end
remove_code(dc)
return {'denied'}
