-- pairing_drop: delete by device code (single use after an approved poll).
-- lib: pairing
--
-- KEYS[1]  pc:d   KEYS[2]  pc:x
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  deviceCode
-- Reply: 1

remove_code(ARGV[4])
return 1
