-- ops_token_put: store a scoped view token (its SHA-256, never the token)
-- with its record, for the operations view, bound to its site's
-- generation. Bounded by the "most tokens" argument; at the bound, tokens of
-- sites that left the projection (or left and came back) are dropped first.
--
-- A site's generation is the projection version at which it (last) entered
-- the projection, kept by projection/projection_put.lua in projection:sites.
-- A token reads only while its site's generation is the one it was minted
-- in (ops_token_get): a site that leaves the projection, or leaves and is
-- re-added under the same id, does not revive old tokens.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  tokens      ops:tk            HASH  token digest (hex) -> record JSON {id, site, createdAt}
-- KEYS[2]  ids         ops:ti            HASH  token id -> token digest
-- KEYS[3]  gens        ops:tg            HASH  token digest -> "<generation>|<id>|<site>"
-- KEYS[4]  sites       projection:sites  HASH  site id -> generation (projectionsync)
-- KEYS[5]  projection  projection        HASH  version, json, ... (projectionsync)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  digest      digest
-- ARGV[5]  id          id
-- ARGV[6]  record      record JSON
-- ARGV[7]  most        most tokens
-- ARGV[8]  site        site id
-- ARGV[9]  seen        the projection version the caller saw the site in ("" = do not check)
-- Reply: 1 stored; 0 refused (the cap is reached or the id or digest exists);
--        -1 the projection moved on since the caller read it (read it again);
--        -2 the stored projection has no such site

local tokens = KEYS[1]
local ids = KEYS[2]
local gens = KEYS[3]
local sites = KEYS[4]
local projection = KEYS[5]
local digest = ARGV[4]
local id = ARGV[5]
local record = ARGV[6]
local most = tonumber(ARGV[7])
local site = ARGV[8]
local seen = ARGV[9]

local gen = redis.call('HGET', sites, site)
if not gen then
  if redis.call('EXISTS', sites) == 1 then
    return -2
  end
  -- No generations recorded yet (a projection written before they were
  -- kept, or one with no sites): the site's starts now, if the caller's
  -- projection is the stored one (then the site is in it).
  local version = redis.call('HGET', projection, 'version') or '0'
  if seen == '' or version ~= seen then
    return -1
  end
  gen = version
  redis.call('HSET', sites, site, gen)
end

if redis.call('HLEN', ids) >= most then
  -- Make room: drop the tokens whose site's generation has passed.
  local all = redis.call('HGETALL', gens)
  for i = 1, #all, 2 do
    local g, tid, s = string.match(all[i + 1], '^([^|]*)|([^|]*)|(.*)$')
    if g == nil or redis.call('HGET', sites, s) ~= g then
      redis.call('HDEL', tokens, all[i])
      redis.call('HDEL', gens, all[i])
      if tid then
        redis.call('HDEL', ids, tid)
      end
    end
  end
  if redis.call('HLEN', ids) >= most then
    return 0
  end
end
if redis.call('HEXISTS', tokens, digest) == 1 or redis.call('HEXISTS', ids, id) == 1 then
  return 0
end
redis.call('HSET', tokens, digest, record)
redis.call('HSET', ids, id, digest)
redis.call('HSET', gens, digest, gen .. '|' .. id .. '|' .. site)
return 1
