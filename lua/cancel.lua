-- cancel: the site withdraws a job (§2.12). A flag, not a state: no
-- requeue, no end of the grant. Idempotent; works in every state.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  job         j:<eS>:<eJ>
-- ARGV[1..3] common  prefix, offset, churn (unused: cancel neither reads the clock nor settles)
-- ARGV[4]  m           member <eS>:<eJ>
-- Reply: 1 (cancelled) | 0 (no such job at this site)

local job = KEYS[1]
local m = ARGV[4]

local h = core(m)
if not h then
  return 0
end
redis.call('HSET', job, 'cx', '1')
redis.call('SREM', live_set(h.eS), h.eJ) -- a cancelled job no longer counts against the site
if h.state == QUEUED then
  local qk, qm = queue_of(h) -- a cancelled queued job belongs to no queue
  redis.call('ZREM', qk, qm)
end
if h.cl then
  redis.call('ZADD', P .. 'cxl:' .. h.ecr, h.seq, m)
end
return 1
