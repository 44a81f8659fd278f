-- runner_shards_add: after a claim granted on some shards, the runner's
-- record of those shards (rsh) takes each with the latest deadline of its
-- grants, and the runner's presence record forgets that rsh held none
-- (nr, kept after the digest in field ld, see presence_beat), in one
-- call: a heartbeat then reads rsh again, so the new grants' cancel
-- requests reach the daemon on its next beat. Written before the claim
-- answers, so it exists before the daemon can present any lease (store.md
-- trap 36). Go skips the call when its read of rsh and of the record,
-- made with the claim's queue heads, shows rsh already covers the new
-- grants and no nr stands (internal/store shardsRecorded). A claim that
-- carries the runner's keys (lua/claim.lua, runner_mode) makes this write
-- itself, with the same lib/presence.lua record_runner_shards.
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  shards       rsh:<eR>
-- KEYS[2]  record       p:<eR>
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4..] by_shard   pairs: shard index, the latest deadline of its new grants (ms), rounded up (Go recordedDeadline)
-- Reply: the number of shards rsh gained

local shards = KEYS[1]
local record = KEYS[2]
local by_shard = tail(ARGV, 4)

if #by_shard < 2 or #by_shard % 2 ~= 0 then
  return redis.error_reply('ERR relay: runner_shards_add: ARGV holds no shard and deadline pairs')
end
return record_runner_shards(shards, record, by_shard)
