-- pairing_put: store a pending pairing (§6.2) in the reference's order:
-- purge expired, drop this keypair's previous code, check capacity, store.
-- The purge is bounded (PURGE_PER_CALL codes per call, more than the one a
-- call adds, so expired codes drain) and the capacity counts live codes
-- only, which is what the reference's full purge leaves; every read checks
-- expiry itself, so a lingering expired code is never seen.
-- Beyond the reference, live codes are also counted per source address
-- (KEYS[8], pruned of expired entries here), so one client cannot take the
-- whole capacity; re-pairing the same keypair replaces its code first and
-- so never needs a free slot of either kind. Live codes are counted per
-- network too (KEYS[10]: the source's /24, or /48 for IPv6; Go derives it),
-- so a block of addresses is bounded as one client, and the last part of
-- the capacity (ARGV[14] codes) goes only to a network holding no live
-- code: however many networks came first, a fresh one still gets a code
-- until that reserve is spent too.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:d   KEYS[2]  pc:x   KEYS[3]  pc:mi   KEYS[4]  pc:mu
-- KEYS[5]  pc:i   KEYS[6]  pc:u   KEYS[7]  pc:ms   KEYS[8]  pc:a:<source>
-- KEYS[9]  pc:mn  KEYS[10] pc:n:<network>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  capacity   ARGV[5]  deviceCode   ARGV[6]  userCode
-- ARGV[7]  device identity   ARGV[8]  expiresAt   ARGV[9]  pending (raw JSON)
-- ARGV[10] source (base64url; "" for none: no per-source count)
-- ARGV[11] live codes allowed per source
-- ARGV[12] network (base64url; "" for none: no per-network count, no reserve)
-- ARGV[13] live codes allowed per network
-- ARGV[14] codes of the capacity reserved for networks holding none
-- Reply: 'stored' | 'at-capacity' | 'source-busy' | 'network-busy'

local cap, dc, uc, identity = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local source, per_source = ARGV[10], tonumber(ARGV[11])
local network, per_network, reserved = ARGV[12], tonumber(ARGV[13]), tonumber(ARGV[14])
local now = clock()

local PURGE_PER_CALL = 16

-- 1. Purge expired entries, a bounded number per call.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(now), 'LIMIT', 0, PURGE_PER_CALL)) do
  remove_code(old)
end
-- 2. One outstanding code per keypair; also replaces a code reused verbatim.
local previous = redis.call('HGET', KEYS[5], identity)
if previous then
  remove_code(previous)
end
if redis.call('HEXISTS', KEYS[1], dc) == 1 then
  remove_code(dc)
end
-- 3. Live codes of this source, then of everyone, after this keypair's old
-- code is gone.
if source ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', fmt(now))
  if redis.call('ZCARD', KEYS[8]) >= per_source then
    return 'source-busy'
  end
end
local network_held = 0
if network ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', fmt(now))
  network_held = redis.call('ZCARD', KEYS[10])
  if network_held >= per_network then
    return 'network-busy'
  end
end
local live = redis.call('ZCOUNT', KEYS[2], '(' .. fmt(now), '+inf')
if live >= cap then
  return 'at-capacity'
end
-- A start without a source is counted nowhere but here (as before the
-- per-source bound): only a known network can be told apart as fresh.
if network ~= '' and network_held > 0 and live >= cap - reserved then
  return 'at-capacity'
end
-- 4. Store.
redis.call('HSET', KEYS[1], dc, ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[8], dc)
redis.call('HSET', KEYS[3], dc, identity)
redis.call('HSET', KEYS[4], dc, uc)
redis.call('HSET', KEYS[5], identity, dc)
local holder = redis.call('HGET', KEYS[6], uc)
if not holder or not live_code(holder, now) then
  redis.call('HSET', KEYS[6], uc, dc)
end
if source ~= '' then
  redis.call('HSET', KEYS[7], dc, source)
  redis.call('ZADD', KEYS[8], ARGV[8], dc)
  -- The source's index lives as long as its latest code, so an address
  -- that stops pairing leaves nothing behind.
  local ttl = tonumber(ARGV[8]) - now
  if ttl > 0 and redis.call('PTTL', KEYS[8]) < ttl then
    redis.call('PEXPIRE', KEYS[8], fmt(ttl))
  end
end
if network ~= '' then
  redis.call('HSET', KEYS[9], dc, network)
  redis.call('ZADD', KEYS[10], ARGV[8], dc)
  local ttl = tonumber(ARGV[8]) - now
  if ttl > 0 and redis.call('PTTL', KEYS[10]) < ttl then
    redis.call('PEXPIRE', KEYS[10], fmt(ttl))
  end
end
return 'stored'
