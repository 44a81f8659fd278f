-- lib/pairing.lua: pending device-code pairings (§6, §9.5), prepended after
-- lib/common.lua to scripts whose header says "-- lib: pairing".
--
-- Keys (all under the store prefix, so in the same slot):
--   pc:d   HASH deviceCode -> pending pairing (raw JSON)
--   pc:x   ZSET deviceCode -> expiresAt
--   pc:mi  HASH deviceCode -> device identity   (purge without decoding JSON)
--   pc:mu  HASH deviceCode -> userCode
--   pc:i   HASH identity   -> deviceCode        (one code per keypair)
--   pc:u   HASH userCode   -> deviceCode        (first live insert wins)
--   pc:ms  HASH deviceCode -> source address (base64url), when one was given
--   pc:a:<source>  ZSET deviceCode -> expiresAt: the source's codes (its
--          live ones are counted against the per-source limit)
--   pc:ok  HASH deviceCode -> runnerId          (approved through the admin API)

local PC = P .. 'pc:'

local function remove_code(dc)
  local identity = redis.call('HGET', PC .. 'mi', dc)
  local user_code = redis.call('HGET', PC .. 'mu', dc)
  local source = redis.call('HGET', PC .. 'ms', dc)
  redis.call('HDEL', PC .. 'd', dc)
  redis.call('ZREM', PC .. 'x', dc)
  redis.call('HDEL', PC .. 'mi', dc)
  redis.call('HDEL', PC .. 'mu', dc)
  if source then
    redis.call('HDEL', PC .. 'ms', dc)
    redis.call('ZREM', PC .. 'a:' .. source, dc)
  end
  redis.call('HDEL', PC .. 'ok', dc)
  if identity and redis.call('HGET', PC .. 'i', identity) == dc then
    redis.call('HDEL', PC .. 'i', identity)
  end
  if user_code and redis.call('HGET', PC .. 'u', user_code) == dc then
    redis.call('HDEL', PC .. 'u', user_code)
  end
end

-- The pending JSON of a live code (expiresAt > now), else false. Reads only.
local function live_code(dc, now)
  local exp = redis.call('ZSCORE', PC .. 'x', dc)
  if not exp or tonumber(exp) <= now then
    return false
  end
  return redis.call('HGET', PC .. 'd', dc)
end
