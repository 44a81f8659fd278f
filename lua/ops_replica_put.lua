-- ops_replica_put: a replica's heartbeat record for the operations view.
-- Bounded: one string per replica that expires with its TTL, and an index
-- trimmed of entries older than the TTL and to ARGV[7] members.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/opsstore; keys in internal/store/opskeys.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  ops_rs      ops:rs        ZSET  replica id (base64url) -> last write (ms)
-- KEYS[2]  ops_r       ops:r:<eid>   STR   the replica's record (JSON written by Go)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  eid
-- ARGV[5]  record      JSON
-- ARGV[6]  ttl         TTL in ms
-- ARGV[7]  most        replicas indexed
-- Reply: now (ms, Valkey TIME)

local ops_rs = KEYS[1]
local ops_r = KEYS[2]
local eid = ARGV[4]
local record = ARGV[5]
local ttl = tonumber(ARGV[6])
local most = ARGV[7]

local now = clock()
redis.call('SET', ops_r, record, 'PX', ttl)
redis.call('ZADD', ops_rs, fmt(now), eid)
redis.call('ZREMRANGEBYSCORE', ops_rs, '-inf', '(' .. fmt(now - ttl))
redis.call('ZREMRANGEBYRANK', ops_rs, 0, -(tonumber(most) + 1))
return fmt(now)
