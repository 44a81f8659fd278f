-- pairing_get: a pending pairing by device code, only while live
-- (expiresAt > now). An expired entry is not deleted on read (§6.3).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:d   KEYS[2]  pc:x
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  deviceCode
-- Reply: raw JSON or nil

return live_code(ARGV[4], clock())
