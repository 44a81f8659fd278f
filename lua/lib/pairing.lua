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
--   pc:mn  HASH deviceCode -> network of the source (base64url), when known
--   pc:n:<network> ZSET deviceCode -> expiresAt: the network's codes (its
--          /24 or /48; live ones count against the per-network limit)
--   pc:ok  HASH deviceCode -> runnerId          (approved through the admin API)

local function remove_code(dc)
  local identity = redis.call('HGET', P .. 'pc:mi', dc)
  local user_code = redis.call('HGET', P .. 'pc:mu', dc)
  local source = redis.call('HGET', P .. 'pc:ms', dc)
  local network = redis.call('HGET', P .. 'pc:mn', dc)
  redis.call('HDEL', P .. 'pc:d', dc)
  redis.call('ZREM', P .. 'pc:x', dc)
  redis.call('HDEL', P .. 'pc:mi', dc)
  redis.call('HDEL', P .. 'pc:mu', dc)
  if source then
    redis.call('HDEL', P .. 'pc:ms', dc)
    redis.call('ZREM', P .. 'pc:a:' .. source, dc)
  end
  if network then
    redis.call('HDEL', P .. 'pc:mn', dc)
    redis.call('ZREM', P .. 'pc:n:' .. network, dc)
  end
  redis.call('HDEL', P .. 'pc:ok', dc)
  if identity and redis.call('HGET', P .. 'pc:i', identity) == dc then
    redis.call('HDEL', P .. 'pc:i', identity)
  end
  if user_code and redis.call('HGET', P .. 'pc:u', user_code) == dc then
    redis.call('HDEL', P .. 'pc:u', user_code)
  end
end

-- The pending JSON of a live code (expiresAt > now), else false. Reads only.
local function live_code(dc, now)
  local exp = redis.call('ZSCORE', P .. 'pc:x', dc)
  if not exp or tonumber(exp) <= now then
    return false
  end
  return redis.call('HGET', P .. 'pc:d', dc)
end
