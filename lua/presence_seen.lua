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
-- KEYS[1]  record       p:<eR>
-- KEYS[2]  index        pidx (eR -> insertion counter)
-- KEYS[3]  seq_key      pseq
-- KEYS[4]  by_owner     po:<eO> (the owner's records, for presence_by_owner;
--                       an entry under the wrong owner or of a gone record is
--                       dropped there)
-- KEYS[5]  rsh          rsh:<eR> (optional; see above)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4..] heartbeat   nine values: eR, runnerId, owner, device (raw JSON),
--                       capabilities (raw JSON), withheld (raw JSON), ttl ms
--                       ("0": records never expire, as in the reference),
--                       the heartbeat digest of owner, device and the lists
--                       (computed by the caller, kept as ld for
--                       presence_beat), the condition ("1": the record must
--                       exist with this owner and device, else "")
-- Reply: the record as a flat hash without capabilities and withheld (the
-- caller has them), so a heartbeat does not copy its own lists back; under
-- the condition only lastSeenAt (runnerId, owner and device are the
-- caller's own); with rsh, one more field "rsh": the shard indexes of that
-- record, space-separated. Empty when the condition does not hold.

local record = KEYS[1]
local index = KEYS[2]
local seq_key = KEYS[3]
local by_owner = KEYS[4]
local rsh = KEYS[5]
local heartbeat = tail(ARGV, 4)

return seen_record(record, index, seq_key, by_owner, rsh, heartbeat, 1, fmt(clock()))
