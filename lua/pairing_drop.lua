-- pairing_drop: delete by device code (single use after an approved poll).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  codes        pc:d, device code -> pending JSON (lib/pairing.lua
--                       removes the code from it and every index, from P)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  device_code  the device code
-- Reply: 1

local device_code = ARGV[4]

remove_code(device_code)
return 1
