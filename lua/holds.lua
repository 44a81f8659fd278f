-- holds: the bare-id probe of §2.0 step 2 on one shard: does the runner
-- currently hold a job with this bare id here? Go asks each shard of the
-- runner's record that the lease's own shard did not answer for.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  hid         hid:<eR> on the shard; job records are built from its prefix
-- ARGV[1..3] common  prefix, offset, churn flag
-- ARGV[4]  e_job       (base64url job id)
-- ARGV[5]  e_runner    (base64url runner id)
-- Reply: {1 | 0, reports} (candidates are settled first, §9.8)

local e_job = ARGV[4]
local e_runner = ARGV[5]

local now = clock()
if holds_bare(e_job, e_runner, now) then
  return {1, REPORTS}
end
return {0, REPORTS}
