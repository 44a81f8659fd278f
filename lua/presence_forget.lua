-- presence_forget: forget named runners of one shard at once: a device
-- the projection no longer holds, or holds revoked (the sweeper passes
-- the ones a projection change removed). What goes is what presence_reap
-- takes from a silent device (forget_runner, lib/presence.lua), whatever
-- its last heartbeat.
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  retention_index  ls (the shard's retention index; names the shard)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4..] runners     eR of each runner (all on this shard; at most 256)
-- Reply: the number of presence records deleted

local runners = tail(ARGV, 4)

if #runners < 1 or #runners > 256 then
  return redis.error_reply('ERR relay: presence_forget: 1..256 runners')
end
local now = clock()
local n = 0
for _, e_runner in ipairs(runners) do
  n = n + forget_runner(P, e_runner, now)
end
return n
