-- enqueue: store a new job, or return the existing one unchanged (§2.2).
-- lib: store
--
-- KEYS[1]  j:<eS>:<eJ>            job record
-- KEYS[2]  seq                    global FIFO counter
-- KEYS[3]  all                    every job, member <eS>:<eJ>, score seq
-- KEYS[4]  q:<eS>:<eO>:<eK>:<eA>  the job's ready queue
-- KEYS[5]  due                    deadline index
-- KEYS[6]  epoch                  this namespace's data generation (see below)
-- ARGV[1..3] prefix, offset (unused: enqueue never reads the clock), churn
-- ARGV[4]  member <eS>:<eJ>
-- ARGV[5]  job id            ARGV[6]  site id        ARGV[7]  stub (raw JSON)
-- ARGV[8]  stub.owner        ARGV[9]  stub.kind      ARGV[10] stub.audience
-- ARGV[11] stub.deadlineAt (decimal)
-- ARGV[12..16] eS, eJ, eO, eK, eA (base64url of site, job, owner, kind, audience)
-- ARGV[17] epoch candidate: written to KEYS[6] only when none is there
-- Reply: {created (1|0), snapshot}; snapshot = {flat hash, refusedBy, flat retryAfter}

local m = ARGV[4]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, snapshot(m, false)}
end
-- The first job of a namespace names its data generation. A store that lost
-- its data (restart without persistence, FLUSHALL, failover to a stale
-- replica) restarts seq too, so a replica's caches keyed by seq are trusted
-- only while the epoch they were filled under is still the one stored.
redis.call('SET', KEYS[6], ARGV[17], 'NX')
local seq = fmt(redis.call('INCR', KEYS[2]))
redis.call('HSET', KEYS[1],
  'id', ARGV[5], 'site', ARGV[6], 'stub', ARGV[7],
  'owner', ARGV[8], 'kind', ARGV[9], 'aud', ARGV[10], 'dl', ARGV[11],
  'seq', seq, 'state', QUEUED,
  'eS', ARGV[12], 'eJ', ARGV[13], 'eO', ARGV[14], 'eK', ARGV[15], 'eA', ARGV[16])
redis.call('ZADD', KEYS[3], seq, m)
redis.call('ZADD', KEYS[4], seq, ARGV[13])
redis.call('ZADD', KEYS[5], ARGV[11], m)
move_state(m, nil, QUEUED)
return {1, snapshot(m, false)}
