-- release: hand grants back (§2.10). Each named grant is released at most
-- once, in input order; skips are silent. A done job is never reopened.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease        the lease index (on the leases' shard: Go groups leases
--                       by the shard their id names; job records are built
--                       from KEYS[1]'s prefix)
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  runner       the runner id
-- ARGV[5]  reason       "" for none
-- ARGV[6]  retry_after  absolute ms on the caller's clock, "" for none
-- ARGV[7]  n            how many grants (at most store.GrantChunk, 32)
-- ARGV[8..] grants      n pairs: eJ, leaseId
-- Reply: {released: per pair in input order, "1" released or "0" skipped, reports}

local runner = ARGV[4]
local reason = ARGV[5]
local retry_after = ARGV[6]
local n = tonumber(ARGV[7])
local grants = tail(ARGV, 8)

local now = clock()
local released = {}
for i = 0, n - 1 do
  local e_job, lease_id = grants[1 + 2 * i], grants[2 + 2 * i]
  -- Only the exact grant can be released: a fallback candidate always holds
  -- another lease, and the reference skips it.
  local m, h = resolve_exact(e_job, lease_id, now)
  if m and h.cr == runner and h.state ~= DONE then
    local jk = jkey(m)
    if reason == 'refused' and not redis.call('ZSCORE', jk .. ':ref', runner) then
      -- score = position, so refusedBy reads back in refusal order
      redis.call('ZADD', jk .. ':ref', redis.call('ZCARD', jk .. ':ref'), runner)
    end
    if retry_after ~= '' then
      redis.call('HSET', jk .. ':ra', runner, retry_after)
    end
    requeue(m, h)
    released[i + 1] = '1'
  else
    released[i + 1] = '0'
  end
end
return {released, REPORTS}
