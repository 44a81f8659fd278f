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
-- KEYS[1]  pc_d        pc:d
-- KEYS[2]  pc_x        pc:x
-- KEYS[3]  pc_mi       pc:mi
-- KEYS[4]  pc_mu       pc:mu
-- KEYS[5]  pc_i        pc:i
-- KEYS[6]  pc_u        pc:u
-- KEYS[7]  pc_ms       pc:ms
-- KEYS[8]  pc_a        pc:a:<source>
-- KEYS[9]  pc_mn       pc:mn
-- KEYS[10] pc_n        pc:n:<network>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  cap         capacity
-- ARGV[5]  dc          deviceCode
-- ARGV[6]  uc          userCode
-- ARGV[7]  identity    device identity
-- ARGV[8]  expiresAt
-- ARGV[9]  pending     (raw JSON)
-- ARGV[10] source      source (base64url; "" for none: no per-source count)
-- ARGV[11] per_source  live codes allowed per source
-- ARGV[12] network     network (base64url; "" for none: no per-network count, no reserve)
-- ARGV[13] per_network live codes allowed per network
-- ARGV[14] reserved    codes of the capacity reserved for networks holding none
-- Reply: 'stored' | 'at-capacity' | 'source-busy' | 'network-busy'

local pc_d = KEYS[1]
local pc_x = KEYS[2]
local pc_mi = KEYS[3]
local pc_mu = KEYS[4]
local pc_i = KEYS[5]
local pc_u = KEYS[6]
local pc_ms = KEYS[7]
local pc_a = KEYS[8]
local pc_mn = KEYS[9]
local pc_n = KEYS[10]
local cap = tonumber(ARGV[4])
local dc = ARGV[5]
local uc = ARGV[6]
local identity = ARGV[7]
local expiresAt = ARGV[8]
local pending = ARGV[9]
local source = ARGV[10]
local per_source = tonumber(ARGV[11])
local network = ARGV[12]
local per_network = tonumber(ARGV[13])
local reserved = tonumber(ARGV[14])

local now = clock()

local PURGE_PER_CALL = 16

-- 1. Purge expired entries, a bounded number per call.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', pc_x, '-inf', fmt(now), 'LIMIT', 0, PURGE_PER_CALL)) do
  remove_code(old)
end
-- 2. One outstanding code per keypair; also replaces a code reused verbatim.
local previous = redis.call('HGET', pc_i, identity)
if previous then
  remove_code(previous)
end
if redis.call('HEXISTS', pc_d, dc) == 1 then
  remove_code(dc)
end
-- 3. Live codes of this source, then of everyone, after this keypair's old
-- code is gone.
if source ~= '' then
  redis.call('ZREMRANGEBYSCORE', pc_a, '-inf', fmt(now))
  if redis.call('ZCARD', pc_a) >= per_source then
    return 'source-busy'
  end
end
local network_held = 0
if network ~= '' then
  redis.call('ZREMRANGEBYSCORE', pc_n, '-inf', fmt(now))
  network_held = redis.call('ZCARD', pc_n)
  if network_held >= per_network then
    return 'network-busy'
  end
end
local live = redis.call('ZCOUNT', pc_x, '(' .. fmt(now), '+inf')
if live >= cap then
  return 'at-capacity'
end
-- A start without a source is counted nowhere but here (as before the
-- per-source bound): only a known network can be told apart as fresh.
if network ~= '' and network_held > 0 and live >= cap - reserved then
  return 'at-capacity'
end
-- 4. Store.
redis.call('HSET', pc_d, dc, pending)
redis.call('ZADD', pc_x, expiresAt, dc)
redis.call('HSET', pc_mi, dc, identity)
redis.call('HSET', pc_mu, dc, uc)
redis.call('HSET', pc_i, identity, dc)
local holder = redis.call('HGET', pc_u, uc)
if not holder or not live_code(holder, now) then
  redis.call('HSET', pc_u, uc, dc)
end
if source ~= '' then
  redis.call('HSET', pc_ms, dc, source)
  redis.call('ZADD', pc_a, expiresAt, dc)
  -- The source's index lives as long as its latest code, so an address
  -- that stops pairing leaves nothing behind.
  local ttl = tonumber(expiresAt) - now
  if ttl > 0 and redis.call('PTTL', pc_a) < ttl then
    redis.call('PEXPIRE', pc_a, fmt(ttl))
  end
end
if network ~= '' then
  redis.call('HSET', pc_mn, dc, network)
  redis.call('ZADD', pc_n, expiresAt, dc)
  local ttl = tonumber(expiresAt) - now
  if ttl > 0 and redis.call('PTTL', pc_n) < ttl then
    redis.call('PEXPIRE', pc_n, fmt(ttl))
  end
end
return 'stored'
