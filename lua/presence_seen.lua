-- presence_seen: record a heartbeat (§2.15). An existing record keeps its
-- owner and device; only lastSeenAt, capabilities and withheld are replaced
-- (never merged; an empty array is a value). The record keeps a digest of
-- the two lists (field ld): when a heartbeat carries the lists the record
-- already holds, which is almost every idle tick, only lastSeenAt and the
-- expiry are written. A record without ld (written before it existed)
-- differs from every digest, so its lists are rewritten once.
--
-- A daemon's heartbeat (Store.Heartbeat) makes this its only Valkey call:
-- with ARGV[12] = "1" the record must already exist holding exactly this
-- owner and device (what the relay remembered from its last presence read),
-- else nothing is written and the reply is empty (the relay reads and
-- reconciles, then calls again without the condition); and with KEYS[5]
-- the runner's record of the shards where it may hold grants (on the
-- runner's shard like the presence record) comes back too, so the
-- heartbeat's cancel requests need no read of their own.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  p:<eR>     KEYS[2]  pidx (eR -> insertion counter)   KEYS[3]  pseq
-- KEYS[4]  po:<eO> (the owner's records, for presence_by_owner; an entry
--          under the wrong owner or of a gone record is dropped there)
-- KEYS[5]  rsh:<eR> (optional; see above)
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eR   ARGV[5]  runnerId   ARGV[6]  owner   ARGV[7]  device (raw JSON)
-- ARGV[8]  capabilities (raw JSON)  ARGV[9]  withheld (raw JSON)
-- ARGV[10] ttl ms ("0": records never expire, as in the reference)
-- ARGV[11] digest of ARGV[8] and ARGV[9] (hex; computed by the caller)
-- ARGV[12] "1": the record must exist with owner ARGV[6] and device ARGV[7]
--          (optional)
-- Reply: the record as a flat hash without capabilities and withheld (the
-- caller has them: they are ARGV[8] and ARGV[9]), so a heartbeat does not
-- copy its own lists back; with KEYS[5], one more field "rsh": the shard
-- indexes of that record, space-separated. Empty when ARGV[12]'s condition
-- does not hold.

local now = fmt(clock())
-- One read is both the existence check and the reply's fields: a record
-- always has runnerId.
local r = redis.call('HMGET', KEYS[1], 'runnerId', 'owner', 'device', 'ld')
if ARGV[12] == '1' and (not r[1] or r[2] ~= ARGV[6] or r[3] ~= ARGV[7]) then
  return {}
end
if r[1] then
  if r[4] == ARGV[11] then
    -- Same lists: the owner's index already names this record (it was
    -- added with the record or with the lists, and only a gone record or
    -- another owner's entry is ever dropped from it).
    redis.call('HSET', KEYS[1], 'lastSeenAt', now)
  else
    redis.call('HSET', KEYS[1], 'lastSeenAt', now, 'capabilities', ARGV[8], 'withheld', ARGV[9], 'ld', ARGV[11])
    redis.call('SADD', KEYS[4], ARGV[4])
  end
else
  redis.call('HSET', KEYS[1], 'runnerId', ARGV[5], 'owner', ARGV[6], 'device', ARGV[7],
    'capabilities', ARGV[8], 'withheld', ARGV[9], 'ld', ARGV[11], 'lastSeenAt', now)
  -- A new record goes to the end of the listing, even if an index entry of a
  -- lost record lingers (everyone() cleans those).
  redis.call('ZADD', KEYS[2], next_seq(KEYS[3]), ARGV[4])
  r = {ARGV[5], ARGV[6], ARGV[7]}
  redis.call('SADD', KEYS[4], ARGV[4])
end
if ARGV[10] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
end
local out = {'runnerId', r[1], 'owner', r[2], 'device', r[3], 'lastSeenAt', now}
if KEYS[5] then
  out[9] = 'rsh'
  out[10] = table.concat(redis.call('ZRANGE', KEYS[5], 0, -1), ' ')
end
return out
