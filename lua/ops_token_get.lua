-- ops_token_get: the record of a scoped view token by its digest. Pure read.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/store/opsview.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  ops:tk  HASH  token digest (hex) -> record JSON
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  digest
-- Reply: the record JSON, or nil

return redis.call('HGET', KEYS[1], ARGV[4])
