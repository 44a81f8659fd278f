-- ops_token_get: the record of a scoped view token by its digest, while its
-- site's generation is the one it was minted in (ops_token_put). Pure read.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  tokens      ops:tk            HASH  token digest (hex) -> record JSON
-- KEYS[2]  gens        ops:tg            HASH  token digest -> "<generation>|<id>|<site>"
-- KEYS[3]  sites       projection:sites  HASH  site id -> generation (projectionsync)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  digest      digest
-- Reply: the record JSON; nil when there is no such token, or its site has
--        left the projection since (or left and came back), or it was
--        minted before tokens had generations

local tokens = KEYS[1]
local gens = KEYS[2]
local sites = KEYS[3]
local digest = ARGV[4]

local record = redis.call('HGET', tokens, digest)
if not record then
  return nil
end
local bound = redis.call('HGET', gens, digest)
if not bound then
  return nil
end
local g, s = string.match(bound, '^([^|]*)|[^|]*|(.*)$')
if g == nil or redis.call('HGET', sites, s) ~= g then
  return nil
end
return record
