-- enqueue: store a new job, or return the existing one unchanged (§2.2).
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  j:<eS>:<eJ>            job record
-- KEYS[2]  seq                    global FIFO counter
-- KEYS[3]  q:<eS>:<eO>:<eK>:<eA>  the job's ready queue
-- KEYS[4]  due                    deadline index (every job is in it: Jobs lists it)
-- KEYS[5]  epoch                  this namespace's data generation (see below)
-- KEYS[6]  sl:<eS>                the site's live jobs (lib/store.lua)
-- KEYS[7]  sb:<eS>                the site's stored bytes (lib/store.lua)
-- KEYS[8]  sr:<eS>                the site's enqueue token bucket: HASH t, at
-- ARGV[1..3] prefix, offset (read only for the rate limit), churn (unused)
-- ARGV[4]  member <eS>:<eJ>
-- ARGV[5]  job id            ARGV[6]  site id        ARGV[7]  stub (raw JSON)
-- ARGV[8]  stub.owner        ARGV[9]  stub.kind      ARGV[10] stub.audience
-- ARGV[11] stub.deadlineAt (decimal)
-- ARGV[12..16] eS, eJ, eO, eK, eA (base64url of site, job, owner, kind, audience)
-- ARGV[17] epoch candidate: written to KEYS[6] only when none is there
-- ARGV[18] most live jobs of the site      ARGV[19] most stored bytes of the site
-- ARGV[20] enqueues per second (decimal)   ARGV[21] burst
--          (each "0": no such limit)
-- Announces the new queue entry on the shard's channel P..'work' (announce()
-- in lib/store.lua; same slot), as every requeue does.
-- Reply: {created (1|0), snapshot}; snapshot = {flat hash, refusedBy, flat retryAfter}
--        | {-1, 'jobs' | 'bytes' | 'rate'}: over the site's limit, nothing written

local m = ARGV[4]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, snapshot(m, false)} -- a repeat is answered whatever the limits
end

-- The site's limits (beyond the reference): checked before any write, so a
-- refusal leaves the store as it was; the rate check comes last because
-- taking a token is a write.
local max_jobs, max_bytes = tonumber(ARGV[18]), tonumber(ARGV[19])
local rate, burst = tonumber(ARGV[20]), tonumber(ARGV[21])
if max_jobs > 0 and redis.call('SCARD', KEYS[6]) >= max_jobs then
  return {-1, 'jobs'}
end
if max_bytes > 0 and tonumber(redis.call('GET', KEYS[7]) or '0') + #ARGV[7] > max_bytes then
  return {-1, 'bytes'}
end
if rate > 0 then
  local now = clock()
  local b = redis.call('HMGET', KEYS[8], 't', 'at')
  local tokens = burst
  if b[1] then
    tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate / 1000)
  end
  if tokens < 1 then
    return {-1, 'rate'}
  end
  redis.call('HSET', KEYS[8], 't', tostring(tokens - 1), 'at', fmt(now))
  -- Gone once it would be full again: an idle site keeps no bucket.
  redis.call('PEXPIRE', KEYS[8], fmt(math.ceil(burst / rate * 1000) + 1000))
end
-- The first job of a namespace names its data generation. A store that lost
-- its data (restart without persistence, FLUSHALL, failover to a stale
-- replica) restarts seq too, so a replica's caches keyed by seq are trusted
-- only while the epoch they were filled under is still the one stored.
redis.call('SET', KEYS[5], ARGV[17], 'NX')
local seq = next_seq(KEYS[2])
-- eS and eJ are not stored: the member m names them (core()). Layout v4
-- stores no raw id, site, owner, kind or audience either: the member, the
-- encoded fields and the stub hold them, and no script reads them.
local rec = {'dl', ARGV[11], 'seq', seq, 'state', QUEUED,
  'eO', ARGV[14], 'eK', ARGV[15], 'eA', ARGV[16]}
if not compact() then
  for _, f in ipairs({'id', ARGV[5], 'site', ARGV[6], 'owner', ARGV[8], 'kind', ARGV[9], 'aud', ARGV[10]}) do
    rec[#rec + 1] = f
  end
end
local reply = {'m', m, unpack(rec)}
local size = blob_args('stub', ARGV[7], rec)
redis.call('HSET', KEYS[1], unpack(rec))
redis.call('ZADD', KEYS[3], seq, ARGV[13])
announce(KEYS[3])
redis.call('ZADD', KEYS[4], ARGV[11], m)
move_state(m, nil, QUEUED)
redis.call('SADD', KEYS[6], ARGV[13])
account(m, ARGV[12], size)
-- The new record is what this script wrote: answered without reading it.
reply[#reply + 1] = 'stub'
reply[#reply + 1] = ARGV[7]
if size ~= 0 then
  reply[#reply + 1] = 'by'
  reply[#reply + 1] = tostring(size)
end
return {1, {reply, {}, {}}}
