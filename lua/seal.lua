-- seal: the site hands over the payload sealed to the claiming device
-- (§2.11). No lease, recipient, cancel or window check; settling first
-- (§9.8) turns a seal after the window into too-late/queued or not-found.
-- Clears awaitingUntil and sealAttempts, never reofferTo.
-- lib: blob
-- lib: store
--
-- Beyond the reference, a payload that would take the site past its stored
-- bytes limit is refused (after the reference's own answers), and the job
-- stays awaiting its payload.
--
-- A fetch of the grant waiting on the calling replica may be named
-- (take_runner, take_lease): when the sealed job's grant is that lease held
-- by that runner, the seal also takes the payload for it, as take.lua would
-- right after (the job goes to running, not ready), and the replica hands
-- the payload it already holds to the waiting fetch.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  job         j:<eS>:<eJ>
-- KEYS[2]  site_bytes      sb:<eS>
-- ARGV[1..3] common  prefix, offset, churn flag
-- ARGV[4]  m           member <eS>:<eJ>
-- ARGV[5]  envelope    (raw JSON)
-- ARGV[6]  max_bytes   most stored bytes of the site ("0": no limit)
-- ARGV[7]  take_runner the runner of a waiting fetch ("": none)
-- ARGV[8]  take_lease  that fetch's lease id
-- Announces the seal on the shard's channel P..'work' (announce_sealed() in
-- lib/store.lua), for a replica holding the grant's fetch.
-- Reply: {'ready', lease, taken (1|0), reports} | {'not-found', reports} | {'too-late', was, reports}
--        | {'site-limit', 'bytes', reports}

local job = KEYS[1]
local site_bytes = KEYS[2]
local m = ARGV[4]
local envelope = ARGV[5]
local max_bytes = tonumber(ARGV[6])
local take_runner = ARGV[7]
local take_lease = ARGV[8]

local now = clock()
local h = core(m)
if not h then
  return {'not-found', REPORTS}
end
if settle(m, now, false, h) then
  h = core(m) -- requeued or removed: read what is left
end
if not h then
  return {'not-found', REPORTS}
end
if h.state ~= AWAITING then
  return {'too-late', h.state, REPORTS}
end
if max_bytes > 0 and tonumber(redis.call('GET', site_bytes) or '0') + #envelope > max_bytes then
  return {'site-limit', 'bytes', REPORTS}
end
local taken = take_runner ~= '' and h.cr == take_runner and h.cl == take_lease
local state = READY
if taken then
  state = RUNNING
end
local rec = {'state', state}
local size = blob_args('pl', envelope, rec)
redis.call('HSET', job, unpack(rec))
account(m, h.eS, size)
move_state(m, AWAITING, state)
redis.call('HDEL', job, 'au', 'sa')
leave_awaiting(h)
h.state, h.au, h.sa = state, nil, nil
rescore(m, h)
announce_sealed(h.cl)
return {'ready', h.cl, taken and 1 or 0, REPORTS}
