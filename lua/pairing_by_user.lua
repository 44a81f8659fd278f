-- pairing_by_user: a pending pairing by user code (already normalised by Go:
-- trimmed, upper case), only while live (§6.3).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:u   KEYS[2]  pc:d   KEYS[3]  pc:x
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  userCode
-- Reply: raw JSON or nil

local dc = redis.call('HGET', KEYS[1], ARGV[4])
if not dc then
  return false
end
return live_code(dc, clock())
