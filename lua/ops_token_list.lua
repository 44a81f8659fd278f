-- ops_token_list: every scoped view token's record (never a token or its
-- digest), for the admin. Pure read, bounded by the cap ops_token_put keeps.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  tokens      ops:tk  HASH  token digest (hex) -> record JSON
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- Reply: {record JSON, ...}

local tokens = KEYS[1]

return redis.call('HVALS', tokens)
