-- lib/store.lua: the routing store's shared helpers (store.md §9.4).
-- Prepended after lib/common.lua to every script whose header says
-- "-- lib: store". Key layout: internal/store/doc.go.
--
-- A job is named inside Lua by its member m = <eS>:<eJ> (base64url of the
-- site id and of the job id, neither of which can contain ':'). Its record is
-- the hash P..'j:'..m. The hash carries the encoded forms of the variable
-- key parts the member does not name (eO, eK, eA, ecr, ero) so that scripts
-- can rebuild every index key of a job they discovered without a base64
-- encoder. Scripts read and answer ids, owners, kinds and audiences in
-- these encoded forms only (Go decodes what it shows): records keep no raw
-- id, site, owner, kind or audience, which the member, the encoded fields
-- and the stub already say.

local AWAITING_MS = 10000      -- AWAITING_PAYLOAD_MS
local UNSEALED_PER_PAIR = 2
local EVICT_AT = 3             -- SEAL_ATTEMPTS_BEFORE_EVICTION
local CHURN_EXPIRIES = 6
local CHURN_WINDOW_MS = 300000
local CHURN_QUIET_MS = 3600000
local CHURN_TTL_MS = '7200000' -- backstop expiry of churn keys
local RUNNER_SHARDS_GRAIN = 30000 -- rsh deadlines round up to it (Go runnerShardsGrain)

local QUEUED = 'queued'
local AWAITING = 'awaiting-payload'
local READY = 'ready'
local RUNNING = 'running'
local DONE = 'done'

local PRIVATE_EA = 'cHJpdmF0ZQ' -- the eA of audience "private" (base64url)

-- The call's flags (ARGV[3], lib/common.lua): read per call, never at load.
local function churn_on()
  return string.sub(ARGV[3], 1, 1) == '1'
end
local function announcing()
  return string.sub(ARGV[3], 2, 2) == '1'
end

-- announce(qk): a queue of this shard gained an entry. Replicas' work
-- views (internal/store workView) learn it from the shard's channel
-- P..'work', which hashes to the same slot as every key here (sharded
-- pub/sub, SPUBLISH). The message is the queue key after the prefix. Off
-- when the server has no SPUBLISH (the embedded store).
local function announce(qk)
  if announcing() then
    redis.call('SPUBLISH', P .. 'work', string.sub(qk, #P + 1))
  end
end

-- announce_sealed(lease_id): the payload of the grant lease_id was sealed,
-- on the same channel (internal/payloadwait: a replica holding that grant's
-- fetch answers it at once). '!' starts no queue key, so a work view of a
-- release before this one only notes a queue that does not exist.
local function announce_sealed(lease_id)
  if announcing() then
    redis.call('SPUBLISH', P .. 'work', '!' .. lease_id)
  end
end

local function jkey(m)
  return P .. 'j:' .. m
end

-- The routing fields of a job: everything a transition reads. Blobs (stub,
-- device, payload, result) stay in Valkey unless a reply needs them.
-- eS and eJ are not read: the member names them, and a field a listpack
-- lacks costs a scan of the whole record.
local CORE = {'state', 'dl', 'seq', 'au', 'ce', 'cl', 'cr', 'ecr', 'sa', 'ro', 'ero',
  'cx', 'bad', 'eO', 'eK', 'eA'}

local function core(m)
  local v = redis.call('HMGET', jkey(m), unpack(CORE))
  if not v[1] then
    return nil
  end
  -- One constructor, in CORE's order: Lua sizes the table once (a loop of
  -- assignments regrows it, about 11,000 server instructions a call more,
  -- callgrind); "or nil" leaves a field the record lacks (false from
  -- HMGET) out, as absent.
  local h = {state = v[1] or nil, dl = v[2] or nil, seq = v[3] or nil,
    au = v[4] or nil, ce = v[5] or nil, cl = v[6] or nil, cr = v[7] or nil,
    ecr = v[8] or nil, sa = v[9] or nil, ro = v[10] or nil,
    ero = v[11] or nil, cx = v[12] or nil, bad = v[13] or nil,
    eO = v[14] or nil, eK = v[15] or nil, eA = v[16] or nil}
  h.eS, h.eJ = string.match(m, '^([^:]*):(.*)$')
  return h
end

-- Snapshot fields without the ciphertext blobs; used where a reply may hold
-- many jobs (sweep), so one reply never carries megabytes per job.
local LIGHT = {'dl', 'seq', 'state', 'cr',
  'co', 'cl', 'ce', 'au', 'sa', 'ro', 'cx', 'dp', 'bad'}
local LIGHT_BLOBS = {stub = 8, cd = 4} -- slices asked for with the head (get_blob)

-- snapshot(m, light) -> {flat hash, refusedBy in order, flat retryAfter}, or
-- false when the job does not exist. The flat hash ends with field m (the
-- member): Go takes the job's site and id from it, whatever else the
-- record holds.
local function snapshot(m, light)
  local k = jkey(m)
  local flat
  if light then
    local v = redis.call('HMGET', k, unpack(LIGHT))
    flat = {}
    for i, f in ipairs(LIGHT) do
      if v[i] then
        flat[#flat + 1] = f
        flat[#flat + 1] = v[i]
      end
    end
    if #flat > 0 then
      for _, f in ipairs({'stub', 'cd'}) do
        local b = get_blob(k, f, LIGHT_BLOBS[f])
        if b then
          flat[#flat + 1] = f
          flat[#flat + 1] = b
        end
      end
    end
  else
    flat = merge_blobs(redis.call('HGETALL', k))
  end
  if #flat == 0 then
    return false
  end
  flat[#flat + 1] = 'm'
  flat[#flat + 1] = m
  return {flat, redis.call('ZRANGE', k .. ':ref', 0, -1), redis.call('HGETALL', k .. ':ra')}
end

local function ready_queue(h)
  return P .. 'q:' .. h.eS .. ':' .. h.eO .. ':' .. h.eK .. ':' .. h.eA
end

local function sticky_queue(h)
  return P .. 'sq:' .. h.eS .. ':' .. h.eO .. ':' .. h.ero
end

-- The index a queued, uncancelled job belongs to, and its member there.
local function queue_of(h)
  if h.bad == '1' then
    return P .. 'bad', h.eS .. ':' .. h.eJ
  end
  if h.ero then
    return sticky_queue(h), h.eJ
  end
  return ready_queue(h), h.eJ
end

-- The earliest instant at which settle() could change the job.
local function next_due(h)
  local d = tonumber(h.dl)
  if h.state == AWAITING then
    local a = tonumber(h.au or '0')
    if a < d then
      d = a
    end
  elseif (h.state == READY or h.state == RUNNING) and h.cl then
    local e = tonumber(h.ce)
    if e < d then
      d = e
    end
  end
  return d
end

local function rescore(m, h)
  redis.call('ZADD', P .. 'due', fmt(next_due(h)), m)
end

-- Jobs by state, for metrics only (no decision reads them): the shard's
-- HASH stc, state -> count. Every state change of a job goes through here
-- in the script that makes it, so the counts are exact by construction
-- (TestStateCountsMatchRecords). from or to may be nil (enqueue, forget).
local function move_state(m, from, to)
  if from then
    redis.call('HINCRBY', P .. 'stc', from, -1)
  end
  if to then
    redis.call('HINCRBY', P .. 'stc', to, 1)
  end
end

-- Per-site use, which enqueue and seal check against the site's limits.
-- sl:<eS> is the site's live jobs (a set: a count is an SCARD, a missed move
-- cannot drift): a job is in it from enqueue until it is done, cancelled or
-- gone. sb:<eS> is the bytes of the site's stored blobs (stub, payload,
-- result): a total, which no set can give in O(1), so it is a counter, kept
-- exact by account() below: each job records in its own field 'by' what it
-- has added, every blob write and drop adds its size change (blob_args and
-- drop_blob answer it) to both, and forget() takes back what the record
-- says, so the total is always the sum of the 'by' fields of the jobs that
-- exist.
local function live_set(eS)
  return P .. 'sl:' .. eS
end

local function bytes_key(eS)
  return P .. 'sb:' .. eS
end

local function account(m, eS, delta)
  if delta ~= 0 then
    redis.call('HINCRBY', jkey(m), 'by', delta)
    if redis.call('INCRBY', bytes_key(eS), delta) <= 0 then
      redis.call('DEL', bytes_key(eS))
    end
  end
end

local function leave_awaiting(h)
  redis.call('SREM', P .. 'uns:' .. h.eS .. ':' .. h.eO, h.eJ)
  redis.call('ZREM', P .. 'aw:' .. h.eS, h.eJ)
end

-- Lease ids come in two forms. Go mints a UUID whose first byte names the
-- shard; the claim script appends '.' and the job's eS when the result fits
-- the store's id limit (lua/claim.lua). Such a site-bearing id, with the
-- job id every holder call carries, names the job's record without the
-- lease index, so a done job keeps no index entry (lua/complete.lua drops
-- it). While the grant is open the index still maps the id as granted to
-- the job, so relays of a release before site-bearing ids resolve it, and
-- give_back finds it from the minted UUID and the claim's sites. A bare
-- UUID (a site too long to append, or a grant from before site-bearing
-- ids) is found through the index for the grant's whole life, done
-- included.

-- lease_site(id) -> the eS a site-bearing lease id carries ("" for the
-- empty site id), or nil.
local function lease_site(lease_id)
  return string.match(lease_id, '^[^.]+%.([%w_-]*)$')
end

-- Remove every index entry that names the current grant.
local function drop_grant(m, h)
  if not h.cl then
    return
  end
  if redis.call('HGET', P .. 'lease', h.cl) == m then
    redis.call('HDEL', P .. 'lease', h.cl)
  end
  redis.call('ZREM', P .. 'cxl:' .. h.ecr, m)
  redis.call('ZREM', P .. 'hid:' .. h.ecr, h.eJ .. ':' .. h.eS)
end

-- §1.3 requeue: back to queued with its ORIGINAL seq (FIFO position kept);
-- the grant, the window and the payload go; sealAttempts, reofferTo,
-- refusedBy, retryAfter and cancelled stay.
local function requeue(m, h)
  if h.state == AWAITING then
    leave_awaiting(h)
  end
  drop_grant(m, h)
  local k = jkey(m)
  redis.call('HDEL', k, 'cr', 'ecr', 'co', 'cl', 'ce', 'au')
  drop_blob(k, 'cd')
  account(m, h.eS, -drop_blob(k, 'pl'))
  redis.call('HSET', k, 'state', QUEUED)
  move_state(m, h.state, QUEUED)
  h.state = QUEUED
  h.cr, h.ecr, h.cl, h.ce, h.au = nil, nil, nil, nil, nil
  if h.cx ~= '1' then
    local qk, qm = queue_of(h)
    redis.call('ZADD', qk, h.seq, qm)
    announce(qk)
  end
  rescore(m, h)
end

-- §1.3 forget: the record and every index entry, current lease included.
local function forget(m, h)
  redis.call('ZREM', ready_queue(h), h.eJ)
  if h.ero then
    redis.call('ZREM', sticky_queue(h), h.eJ)
  end
  redis.call('ZREM', P .. 'bad', m)
  leave_awaiting(h)
  redis.call('ZREM', P .. 'fin:' .. h.eS, h.eJ)
  redis.call('ZREM', P .. 'due', m)
  move_state(m, h.state, nil)
  drop_grant(m, h)
  local k = jkey(m)
  redis.call('SREM', live_set(h.eS), h.eJ)
  local by = tonumber(redis.call('HGET', k, 'by') or '0')
  if by ~= 0 and redis.call('DECRBY', bytes_key(h.eS), by) <= 0 then
    redis.call('DEL', bytes_key(h.eS))
  end
  redis.call('DEL', k, k .. ':ref', k .. ':ra')
end

-- §1.6 churn: one note per awaiting-payload timeout, taken before the
-- eviction decision. The member is the ended lease id, so a timeout can only
-- ever be noted once. The report state lives in Valkey, which makes "at most
-- one report per pair per hour" hold across every replica.
local function note_churn(m, h, now)
  if not churn_on() then
    return
  end
  local ck = P .. 'churn:' .. h.eS .. ':' .. h.eO
  local rk = P .. 'churnrep:' .. h.eS .. ':' .. h.eO
  redis.call('ZADD', ck, fmt(now), (h.cl or fmt(now)) .. ':' .. m)
  redis.call('ZREMRANGEBYSCORE', ck, '-inf', '(' .. fmt(now - CHURN_WINDOW_MS))
  redis.call('PEXPIRE', ck, CHURN_TTL_MS)
  local c = redis.call('ZCARD', ck)
  if c >= CHURN_EXPIRIES then
    local last = redis.call('GET', rk)
    if (not last) or now - tonumber(last) >= CHURN_QUIET_MS then
      redis.call('SET', rk, fmt(now), 'PX', CHURN_TTL_MS)
      REPORTS[#REPORTS + 1] = {h.eS, h.eO, c}
    end
  end
end

-- settle(m, now, snap, h) is the per-job sweep of §4, re-reading the record
-- rather than trusting the due score, so concurrent sweepers are harmless
-- (h: the record as core() just read it in this script, to skip a second
-- read). Returns nil when nothing was due, else 'requeued' or 'removed'
-- plus (when snap) a light snapshot: after the requeue, or before the
-- forget.
local function settle(m, now, snap, h)
  h = h or core(m)
  if not h then
    redis.call('ZREM', P .. 'due', m)
    return nil
  end
  if tonumber(h.dl) <= now then
    local s = snap and snapshot(m, true)
    forget(m, h)
    return 'removed', s
  end
  if h.state == AWAITING and tonumber(h.au or '0') <= now then
    note_churn(m, h, now)
    if h.cr and not h.ro then
      redis.call('HSET', jkey(m), 'ro', h.cr, 'ero', h.ecr)
      h.ro, h.ero = h.cr, h.ecr
    end
    local attempts = tonumber(h.sa or '0') + 1
    if attempts >= EVICT_AT then
      local s = snap and snapshot(m, true)
      forget(m, h)
      return 'removed', s
    end
    h.sa = tostring(attempts)
    redis.call('HSET', jkey(m), 'sa', h.sa)
    requeue(m, h)
    return 'requeued', snap and snapshot(m, true)
  end
  if h.cl and (h.state == READY or h.state == RUNNING) and tonumber(h.ce) <= now then
    requeue(m, h)
    return 'requeued', snap and snapshot(m, true)
  end
  rescore(m, h)
  return nil
end

-- §2.0 step 1 with settle-on-touch (§9.8): the job that lease L names, if
-- its bare id encodes to e_job and its grant is still current after
-- settling.
local function resolve_exact(e_job, lease_id, now)
  local eS = lease_site(lease_id)
  local m
  if eS then
    m = eS .. ':' .. e_job
  else
    m = redis.call('HGET', P .. 'lease', lease_id)
    if not m then
      return nil
    end
  end
  local h = core(m)
  if not h or h.cl ~= lease_id then
    if not eS then
      redis.call('HDEL', P .. 'lease', lease_id) -- index entry outlived its grant
    end
    return nil
  end
  if h.eJ ~= e_job then
    return nil
  end
  if settle(m, now, false, h) then
    return nil
  end
  return m, h
end

-- renew_grant is §2.14 for one grant: when the runner still holds it,
-- its lease expiry becomes now + lease_ms (even when earlier than before;
-- awaitingUntil is never touched) and the new expiry is answered, else ""
-- (lost). renew.lua and presence_beat.lua's renewals both decide here.
local function renew_grant(e_job, lease_id, runner, now, lease_ms)
  local m, h = resolve_exact(e_job, lease_id, now)
  if not (m and h.cr == runner) then
    return ''
  end
  h.ce = fmt(now + lease_ms)
  redis.call('HSET', jkey(m), 'ce', h.ce)
  rescore(m, h)
  return h.ce
end

-- §2.0 step 2, reduced to the only question it has to answer: does the
-- runner (encoded eR) currently hold some job whose bare id encodes to eJ?
-- The hid zset holds "<eJ>:<eS>" per held job; base64url has no ':' and ';'
-- sorts right after ':', so the lex range below is exact. Candidates are
-- settled first, so an overdue grant answers as if a sweep had run.
local function holds_bare(e_job, e_runner, now)
  local hk = P .. 'hid:' .. e_runner
  while true do
    local found = redis.call('ZRANGEBYLEX', hk, '[' .. e_job .. ':', '(' .. e_job .. ';', 'LIMIT', 0, 8)
    if #found == 0 then
      return false
    end
    for _, member in ipairs(found) do
      local m = string.sub(member, #e_job + 2) .. ':' .. e_job
      local h = core(m)
      if not h or h.ecr ~= e_runner then
        redis.call('ZREM', hk, member)
      elseif not settle(m, now, false, h) then
        return true
      end
    end
  end
end
