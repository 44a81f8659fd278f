-- ops_replica_put: a replica's heartbeat record for the operations view.
-- Bounded: one string per replica that expires with its TTL, and an index
-- trimmed of entries older than the TTL and to ARGV[7] members.
--
-- Fleet-wide: the view's keys live on "<ns>:{<ns>}:" (small and bounded,
-- internal/store/opsview.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  ops:rs        ZSET  replica id (base64url) -> last write (ms)
-- KEYS[2]  ops:r:<eid>   STR   the replica's record (JSON written by Go)
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eid
-- ARGV[5]  record JSON
-- ARGV[6]  TTL in ms
-- ARGV[7]  most replicas indexed
-- Reply: now (ms, Valkey TIME)

local now = clock()
local ttl = tonumber(ARGV[6])
redis.call('SET', KEYS[2], ARGV[5], 'PX', ttl)
redis.call('ZADD', KEYS[1], fmt(now), ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now - ttl))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[7]) + 1))
return fmt(now)
