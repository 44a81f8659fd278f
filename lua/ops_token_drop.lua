-- ops_token_drop: revoke a scoped view token by its id.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  tokens      ops:tk  HASH  token digest (hex) -> record JSON
-- KEYS[2]  ids         ops:ti  HASH  token id -> token digest
-- KEYS[3]  gens        ops:tg  HASH  token digest -> "<generation>|<id>|<site>" (ops_token_put)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  id          id
-- Reply: 1 revoked, 0 no such token

local tokens = KEYS[1]
local ids = KEYS[2]
local gens = KEYS[3]
local id = ARGV[4]

local d = redis.call('HGET', ids, id)
if not d then
  return 0
end
redis.call('HDEL', tokens, d)
redis.call('HDEL', gens, d)
redis.call('HDEL', ids, id)
return 1
