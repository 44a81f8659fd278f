-- take: hand the sealed payload to the holder of the current grant (§2.8).
-- lib: blob
-- lib: store
--
-- Guards in the reference's order: resolve (not-found), runner (not-holder),
-- lease (stale-lease), payload (not-ready), state (terminal). The grant is
-- settled first (§9.8): an overdue grant answers as if a sweep had run.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease        the lease index (holds_bare reads hid:<eR> from P)
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  e_job        base64url of the job id
-- ARGV[5]  runner       the runner id
-- ARGV[6]  e_runner     base64url of the runner id
-- ARGV[7]  lease_id     the lease id
-- Reply: {'ok', envelope (raw), reports} | {'refused', reason, reports}

local e_job = ARGV[4]
local runner = ARGV[5]
local e_runner = ARGV[6]
local lease_id = ARGV[7]

local now = clock()

local m, h = resolve_exact(e_job, lease_id, now)
if not m then
  if holds_bare(e_job, e_runner, now) then
    return {'refused', 'stale-lease', REPORTS}
  end
  return {'refused', 'not-found', REPORTS}
end
if h.cr ~= runner then
  return {'refused', 'not-holder', REPORTS}
end
-- A job awaiting its payload has none by construction (seal writes it and
-- leaves that state in one step; requeue drops it), so a daemon polling
-- before the seal costs no read of the payload's slices: 34 fields the
-- record lacks, each a scan of the whole listpack.
local payload = h.state ~= AWAITING and get_blob(jkey(m), 'pl', 32)
if not payload then
  return {'refused', 'not-ready', REPORTS}
end
if h.state ~= READY and h.state ~= RUNNING then
  return {'refused', 'terminal', REPORTS}
end
if h.state == READY then
  redis.call('HSET', jkey(m), 'state', RUNNING)
  move_state(m, READY, RUNNING)
end
return {'ok', payload, REPORTS}
