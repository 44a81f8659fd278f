-- renew: move the lease expiry of grants still held (§2.14). The new expiry
-- replaces the old one even when earlier; awaitingUntil is never touched.
-- Done jobs renew. A grant that settling ends is reported lost (§9.8).
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease        the lease index (on the leases' shard, as for release)
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  runner       the runner id
-- ARGV[5]  lease_ms     the lease length, ms
-- ARGV[6]  n            how many grants (at most store.GrantChunk, 32)
-- ARGV[7..] grants      n pairs: eJ, leaseId
-- Reply: {outcomes: per pair in input order, the new expiry or "" (lost), reports}

local runner = ARGV[4]
local lease_ms = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local grants = tail(ARGV, 7)

local now = clock()
local renewed = {}
for i = 0, n - 1 do
  local e_job, lease_id = grants[1 + 2 * i], grants[2 + 2 * i]
  renewed[i + 1] = renew_grant(e_job, lease_id, runner, now, lease_ms)
end
return {renewed, REPORTS}
