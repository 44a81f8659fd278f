-- jobs_page: full snapshots of a batch of jobs of one shard, for Jobs (§2.4),
-- which finds them by scanning the shard's due index (every job has a
-- deadline, so every job is in it) and orders them by seq itself. Pure read.
-- lib: blob
-- lib: store
-- lib: pages
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  due          (only its prefix is used: the members name the records)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  budget       bytes: the reply ends after the member whose snapshot reaches it
-- ARGV[5..] members     <eS>:<eJ> each
-- Reply: {members consumed, snapshots...}: a member whose record is gone
--        (forgotten since the scan) is consumed without a snapshot

local budget = tonumber(ARGV[4])
local members = tail(ARGV, 5)

local out = {0}
local bytes = 0
for i, m in ipairs(members) do
  out[1] = i
  local added
  bytes, added = add_snapshot(out, m, bytes)
  if added and bytes >= budget then
    return out
  end
end
return out
