-- ops_token_put: store a scoped view token (its SHA-256, never the token)
-- with its record, for the operations view. Bounded by ARGV[7] tokens.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/store/opsview.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  ops:tk  HASH  token digest (hex) -> record JSON {id, site, createdAt}
-- KEYS[2]  ops:ti  HASH  token id -> token digest
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  digest   ARGV[5]  id   ARGV[6]  record JSON   ARGV[7]  most tokens
-- Reply: 1 stored, 0 refused (the cap is reached or the id or digest exists)

if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then
  return 0
end
if redis.call('HEXISTS', KEYS[1], ARGV[4]) == 1 or redis.call('HEXISTS', KEYS[2], ARGV[5]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[4], ARGV[6])
redis.call('HSET', KEYS[2], ARGV[5], ARGV[4])
return 1
