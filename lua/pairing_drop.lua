-- pairing_drop: delete by device code (single use after an approved poll).
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:d   KEYS[2]  pc:x
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  deviceCode
-- Reply: 1

remove_code(ARGV[4])
return 1
