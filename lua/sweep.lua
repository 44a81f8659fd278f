-- sweep: settle one bounded batch of due jobs (§4, §9.7). Go calls it until
-- 'more' is 0. Each settle re-checks the record inside this atomic step, so
-- concurrent sweepers count each timeout exactly once.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  due_index
-- ARGV[1..3] common  prefix, offset, churn flag
-- ARGV[4]  batch_arg   size
-- Reply: {requeued snapshots (after the requeue), removed snapshots (before
--         the forget), reports, more (1|0)}. Snapshots are light: no payload
--         or result ciphertext.

local due_index = KEYS[1]
local batch_arg = ARGV[4]

local now = clock()
local batch = redis.call('ZRANGEBYSCORE', due_index, '-inf', fmt(now), 'LIMIT', 0, tonumber(batch_arg))
local requeued, removed = {}, {}
for _, m in ipairs(batch) do
  local outcome, snap = settle(m, now, true)
  if outcome == 'requeued' then
    requeued[#requeued + 1] = snap
  elseif outcome == 'removed' then
    removed[#removed + 1] = snap
  end
end
local more = 0
if #redis.call('ZRANGEBYSCORE', due_index, '-inf', fmt(now), 'LIMIT', 0, 1) > 0 then
  more = 1
end
return {requeued, removed, REPORTS, more}
