-- runner_shards_add: after a claim granted on some shards, the runner's
-- record of those shards (rsh) takes each with the latest deadline of its
-- grants, and the runner's presence record forgets that rsh held none
-- (nr, kept after the digest in field ld, see presence_beat), in one
-- call: a heartbeat then reads rsh again, so the new grants' cancel
-- requests reach the daemon on its next beat. Written before the claim
-- answers, so it exists before the daemon can present any lease (store.md
-- trap 36). Go skips the call when its read of rsh and of the record,
-- made with the claim's queue heads, shows rsh already covers the new
-- grants and no nr stands (internal/store shardsRecorded).
--
-- mode: write
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
local args = {}
for i = 1, #by_shard, 2 do
  args[#args + 1] = by_shard[i + 1]
  args[#args + 1] = by_shard[i]
end
local added = redis.call('ZADD', shards, 'GT', unpack(args))
-- The record ends ten minutes after its latest deadline: nothing it
-- names is reported past a deadline (cancel requests), and due jobs are
-- forgotten within a sweep of theirs. So it ends even when its runner's
-- presence record went first (reaped or forgotten between the claim's
-- check and this call) and nothing else would delete it.
local hi = 0
for i = 2, #by_shard, 2 do
  hi = math.max(hi, tonumber(by_shard[i]) or 0)
end
local last = redis.call('ZRANGE', shards, -1, -1, 'WITHSCORES')
hi = math.max(hi, tonumber(last[2] or '') or 0)
redis.call('PEXPIREAT', shards, fmt(hi + 600000))
local ld = redis.call('HGET', record, 'ld')
local cut = ld and string.find(ld, ':', 1, true)
if cut then
  redis.call('HSET', record, 'ld', string.sub(ld, 1, cut - 1))
end
return added
