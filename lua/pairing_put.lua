-- pairing_put: store a pending pairing (§6.2) in the reference's order:
-- purge expired, drop this keypair's previous code, check capacity, store.
-- lib: pairing
--
-- KEYS[1]  pc:d   KEYS[2]  pc:x   KEYS[3]  pc:mi   KEYS[4]  pc:mu
-- KEYS[5]  pc:i   KEYS[6]  pc:u
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  capacity   ARGV[5]  deviceCode   ARGV[6]  userCode
-- ARGV[7]  device identity   ARGV[8]  expiresAt   ARGV[9]  pending (raw JSON)
-- Reply: 'stored' | 'at-capacity'

local cap, dc, uc, identity = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local now = clock()

-- 1. Purge every expired entry, so the cap cannot latch.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(now))) do
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
-- 3. Capacity, after this keypair's old code is gone.
if redis.call('ZCARD', KEYS[2]) >= cap then
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
return 'stored'
