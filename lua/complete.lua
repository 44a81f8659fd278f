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
-- KEYS[1]  lease        the lease index (holds_bare reads hid:<eR> from P)
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  e_job        base64url of the job id
-- ARGV[5]  runner       the runner id
-- ARGV[6]  e_runner     base64url of the runner id
-- ARGV[7]  lease_id     the lease id
-- ARGV[8]  envelope     the result envelope (raw JSON)
-- ARGV[9]  disposition  the disposition
-- Reply: {'accepted', reports} | {'duplicate', reports} | {'refused', reason, reports}

local lease = KEYS[1]
local e_job = ARGV[4]
local runner = ARGV[5]
local e_runner = ARGV[6]
local lease_id = ARGV[7]
local envelope = ARGV[8]
local disposition = ARGV[9]

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
local rec = {'dp', disposition, 'state', DONE}
local size = blob_args('rs', envelope, rec)
redis.call('HSET', jkey(m), unpack(rec))
move_state(m, was, DONE)
redis.call('SREM', live_set(h.eS), h.eJ)
account(m, h.eS, size)
if was == AWAITING then
  leave_awaiting(h) -- frees the pair's unsealed slot (trap 6)
end
redis.call('ZADD', P .. 'fin:' .. h.eS, h.seq, h.eJ)
if lease_site(lease_id) then
  -- A done job is never given back, and its site-bearing lease id finds it
  -- without the index (lib/store.lua).
  redis.call('HDEL', lease, lease_id)
end
h.state = DONE
rescore(m, h)
return {'accepted', REPORTS}
