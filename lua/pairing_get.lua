-- pairing_get: a pending pairing by device code, only while live
-- (expiresAt > now). An expired entry is not deleted on read (§6.3).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  codes        pc:d, device code -> pending JSON (lib/pairing.lua
--                       reads it and pc:x from P)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  device_code  the device code
-- Reply: raw JSON or nil

local device_code = ARGV[4]

return live_code(device_code, clock())
