-- ops_replicas: the replicas' heartbeat records, newest first, for the
-- operations view. Pure read, bounded by ARGV[4]; records that expired are
-- skipped.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  ops_rs      ops:rs  ZSET replica id (base64url) -> last write (ms)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  most        records read
-- Reply: {record JSON, ...}

local ops_rs = KEYS[1]
local most = ARGV[4]

local out = {}
local ids = redis.call('ZREVRANGE', ops_rs, 0, tonumber(most) - 1)
for _, id in ipairs(ids) do
  local rec = redis.call('GET', P .. 'ops:r:' .. id)
  if rec then
    out[#out + 1] = rec
  end
end
return out
