-- presence_seen: record a heartbeat (§2.15); the write itself is
-- seen_record (lib/presence.lua), which says what is kept and replaced.
--
-- A daemon's heartbeat (Store.Heartbeat) makes this its only Valkey call
-- (or shares a presence_seen_batch call with other heartbeats of its
-- shard): with ARGV[12] = "1" the record must already exist holding
-- exactly this owner and device (what the relay remembered from its last
-- presence read), else nothing is written and the reply is empty (the
-- relay reads and reconciles, then calls again without the condition);
-- and with KEYS[5] the runner's record of the shards where it may hold
-- grants (on the runner's shard like the presence record) comes back too,
-- so the heartbeat's cancel requests need no read of their own.
--
-- mode: write
-- lib: presence
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
-- copy its own lists back; under ARGV[12]'s condition only lastSeenAt
-- (runnerId, owner and device are the caller's own); with KEYS[5], one
-- more field "rsh": the shard indexes of that record, space-separated.
-- Empty when ARGV[12]'s condition does not hold.

return seen_record({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]},
  {ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]},
  fmt(clock()))
