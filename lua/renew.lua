-- renew: move the lease expiry of grants still held (§2.14). The new expiry
-- replaces the old one even when earlier; awaitingUntil is never touched.
-- Done jobs renew. A grant that settling ends is reported lost (§9.8).
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease      KEYS[2]  due (on the leases' shard, as for release)
-- ARGV[1..3] prefix, offset, churn flag
-- ARGV[4]  runnerId   ARGV[5]  leaseMs
-- ARGV[6]  n (at most store.GrantChunk, 32), then n pairs: eJ, leaseId
-- Reply: {outcomes: per pair in input order, the new expiry or "" (lost), reports}

local runner, lease_ms = ARGV[4], tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local now = clock()
local renewed = {}
for i = 0, n - 1 do
  local e_job, lease_id = ARGV[7 + 2 * i], ARGV[8 + 2 * i]
  local m, h = resolve_exact(e_job, lease_id, now)
  if m and h.cr == runner then
    h.ce = fmt(now + lease_ms)
    redis.call('HSET', jkey(m), 'ce', h.ce)
    rescore(m, h)
    renewed[i + 1] = h.ce
  else
    renewed[i + 1] = ''
  end
end
return {renewed, REPORTS}
