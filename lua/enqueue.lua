-- enqueue: store a new job, or return the existing one unchanged (§2.2).
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  job         j:<eS>:<eJ>, the job record
-- KEYS[2]  seq_key     seq, the shard's FIFO counter
-- KEYS[3]  queue       q:<eS>:<eO>:<eK>:<eA>, the job's ready queue
-- KEYS[4]  due         deadline index (every job is in it: Jobs lists it)
-- KEYS[5]  epoch       this namespace's data generation (see below)
-- KEYS[6]  live        sl:<eS>, the site's live jobs (lib/store.lua)
-- KEYS[7]  bytes       sb:<eS>, the site's stored bytes (lib/store.lua)
-- KEYS[8]  bucket      sr:<eS>, the site's enqueue token bucket: HASH t, at
-- ARGV[1..3] common    prefix, offset (read only for the rate limit), flags
-- ARGV[4]  m           member <eS>:<eJ>
-- ARGV[5]  stub        the stub (raw JSON)
-- ARGV[6]  deadline    stub.deadlineAt (decimal)
-- ARGV[7]  eS          base64url of the site id
-- ARGV[8]  eJ          base64url of the job id
-- ARGV[9]  eO          base64url of stub.owner
-- ARGV[10] eK          base64url of stub.kind
-- ARGV[11] eA          base64url of stub.audience
-- ARGV[12] epoch_id    epoch candidate: written to KEYS[5] only when none is there
-- ARGV[13] max_jobs    most live jobs of the site ("0": no limit)
-- ARGV[14] max_bytes   most stored bytes of the site ("0": no limit)
-- ARGV[15] rate        enqueues per second, decimal ("0": no limit)
-- ARGV[16] burst       the bucket's size
-- Announces the new queue entry on the shard's channel P..'work' (announce()
-- in lib/store.lua; same slot), as every requeue does.
-- Reply: {created (1|0), snapshot}; snapshot = {flat hash, refusedBy, flat retryAfter}
--        | {-1, 'jobs' | 'bytes' | 'rate'}: over the site's limit, nothing written

local job = KEYS[1]
local seq_key = KEYS[2]
local queue = KEYS[3]
local due = KEYS[4]
local epoch = KEYS[5]
local live = KEYS[6]
local bytes = KEYS[7]
local bucket = KEYS[8]
local m = ARGV[4]
local stub = ARGV[5]
local deadline = ARGV[6]
local eS = ARGV[7]
local eJ = ARGV[8]
local eO = ARGV[9]
local eK = ARGV[10]
local eA = ARGV[11]
local epoch_id = ARGV[12]
local max_jobs = tonumber(ARGV[13])
local max_bytes = tonumber(ARGV[14])
local rate = tonumber(ARGV[15])
local burst = tonumber(ARGV[16])

if redis.call('EXISTS', job) == 1 then
  return {0, snapshot(m, false)} -- a repeat is answered whatever the limits
end

-- The site's limits (beyond the reference): checked before any write, so a
-- refusal leaves the store as it was; the rate check comes last because
-- taking a token is a write.
if max_jobs > 0 and redis.call('SCARD', live) >= max_jobs then
  return {-1, 'jobs'}
end
if max_bytes > 0 and tonumber(redis.call('GET', bytes) or '0') + #stub > max_bytes then
  return {-1, 'bytes'}
end
if rate > 0 then
  local now = clock()
  local b = redis.call('HMGET', bucket, 't', 'at')
  local tokens = burst
  if b[1] then
    tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate / 1000)
  end
  if tokens < 1 then
    return {-1, 'rate'}
  end
  redis.call('HSET', bucket, 't', tostring(tokens - 1), 'at', fmt(now))
  -- Gone once it would be full again: an idle site keeps no bucket.
  redis.call('PEXPIRE', bucket, fmt(math.ceil(burst / rate * 1000) + 1000))
end
-- The first job of a namespace names its data generation. A store that lost
-- its data (restart without persistence, FLUSHALL, failover to a stale
-- replica) restarts seq too, so a replica's caches keyed by seq are trusted
-- only while the epoch they were filled under is still the one stored.
redis.call('SET', epoch, epoch_id, 'NX')
local seq = next_seq(seq_key)
-- eS and eJ are not stored: the member m names them (core()). Nor are the
-- raw id, site, owner, kind or audience: the member, the encoded fields
-- and the stub hold them, and no script reads them.
local rec = {'dl', deadline, 'seq', seq, 'state', QUEUED, 'eO', eO, 'eK', eK, 'eA', eA}
local reply = {'m', m, unpack(rec)}
local size = blob_args('stub', stub, rec)
redis.call('HSET', job, unpack(rec))
redis.call('ZADD', queue, seq, eJ)
announce(queue)
redis.call('ZADD', due, deadline, m)
move_state(m, nil, QUEUED)
redis.call('SADD', live, eJ)
account(m, eS, size)
-- The new record is what this script wrote: answered without reading it.
reply[#reply + 1] = 'stub'
reply[#reply + 1] = stub
if size ~= 0 then
  reply[#reply + 1] = 'by'
  reply[#reply + 1] = tostring(size)
end
return {1, {reply, {}, {}}}
