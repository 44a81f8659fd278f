-- complete: record the first result under the current grant (§2.9).
-- lib: blob
-- lib: store
--
-- Guards: resolve (not-found), runner (not-holder), done (duplicate for the
-- same lease, else stale-lease), lease (stale-lease). Legal from
-- awaiting-payload, ready and running; done keeps its grant, payload and
-- awaitingUntil. Settles the grant first (§9.8).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease      KEYS[2]  hid:<eR>
-- ARGV[1..3] prefix, offset, churn flag
-- ARGV[4]  eJ (base64url job id)      ARGV[5]  runnerId   ARGV[6]  eR
-- ARGV[7]  leaseId    ARGV[8]  result envelope (raw JSON)  ARGV[9]  disposition
-- Reply: {'accepted', reports} | {'duplicate', reports} | {'refused', reason, reports}

local e_job, runner, e_runner, lease_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local now = clock()

local m, h = resolve_exact(e_job, lease_id, now)
if not m then
  -- Any fallback candidate holds a different lease (else the exact lookup
  -- would have found it), so the only answers left are these two.
  if holds_bare(e_job, e_runner, now) then
    return {'refused', 'stale-lease', REPORTS}
  end
  return {'refused', 'not-found', REPORTS}
end
if h.cr ~= runner then
  return {'refused', 'not-holder', REPORTS}
end
if h.state == DONE then
  return {'duplicate', REPORTS}
end
local was = h.state
local rec = {'dp', ARGV[9], 'state', DONE}
local size = blob_args('rs', ARGV[8], rec)
redis.call('HSET', jkey(m), unpack(rec))
move_state(m, was, DONE)
redis.call('SREM', live_set(h.eS), h.eJ)
account(m, h.eS, size)
if was == AWAITING then
  leave_awaiting(h) -- frees the pair's unsealed slot (trap 6)
end
redis.call('ZADD', P .. 'fin:' .. h.eS, h.seq, h.eJ)
h.state = DONE
rescore(m, h)
return {'accepted', REPORTS}
