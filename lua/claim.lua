-- claim: settle what is due, then grant the oldest eligible queued jobs of
-- the caller's routes (§3, §9.6). CLAIM_ATOMIC: choosing, the unsealed cap
-- and the grant are one script.
-- lib: blob
-- lib: store
-- lib: stub
-- lib: presence
--
-- Cost is independent of how many jobs other routes hold: only the queues
-- named in KEYS are read, by a k-way merge on seq (first-enqueue order).
--
-- A call holds one or more sections, one per shard, taken in order with
-- one budget of grants: each settles what is due on its shard, then grants
-- from its routes' queues. On a cluster Go sends one section a call (every
-- key of a section is on its shard's slot); on a server that is not a
-- cluster it sends a claim's shards in one call, which grants exactly what
-- the calls one shard after another would have (each section switches P
-- to its first key's prefix: lib/common.lua on_shard). A section that
-- stops the call (more due than settle_budget, the scan budget spent, a
-- revoked token) ends it there; Go goes on from that section alone.
-- Job records found in a section's queues are built from its prefix, so
-- they are on its shard.
--
-- A section with no routes (nr 0) only settles its shard: on a server
-- that is not a cluster Go puts the shards whose due head it does not know
-- there, after the claim's own sections, instead of reading their heads
-- first. They run even after the grants are all made; a section with
-- routes found after that is skipped (no grants, not settled).
--
-- With runner_mode set (only on a server that is not a cluster, where a
-- call may name keys of any shard) the call also does what Go otherwise
-- does around it with the runner's records, so a claim is one round trip:
-- under 'R' it first checks that the presence record holds this owner
-- and device (else it writes nothing and answers 'presence'), and after
-- granting it brings rsh up to date (what runner_shards_add does, skipped
-- when rsh already covers the grants, as Go's shardsRecorded decides).
-- mode: write
-- slot: KEYS[1]'s on a cluster (one section); every other key is in KEYS or built from its section's first key's
--       prefix (P, lib/common.lua on_shard): one shard a section, the same slot on a cluster
-- KEYS[1..] sections    per section, in ARGV's order: the due index, the
--                       lease index, hid:<eR> (the runner's grants there),
--                       then per route r (in ARGV order): uns:<eS>:<eO>,
--                       aw:<eS>, then nq_r queue keys: the ready queues
--                       q:<eS>:<eO>:<eK>:<eA> for the claimant's kinds
--                       (private only when the route owner is the device
--                       owner), and last the sticky queue sq:<eS>:<eO>:<eR>;
--                       after the sections, when runner_mode is set, the
--                       runner's presence record p:<eR> and its record of
--                       shards rsh:<eR>
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  runner       the runner id
-- ARGV[5]  e_runner     base64url of the runner id
-- ARGV[6]  device_owner the device's owner
-- ARGV[7]  device       the device identity (raw JSON)
-- ARGV[8]  lease_ms     the lease length, ms
-- ARGV[9]  remaining    most jobs granted, over every section
-- ARGV[10] scan_budget  most queue entries examined in this call. When it
--                       stops the merge, the reply's cursors let Go continue
--                       in a next call where this one stopped (each call
--                       stays short).
-- ARGV[11] settle_budget  most due jobs settled in a section; more -> reply
--                       'sweep' (Go drains that shard with sweep and calls
--                       again). -1: settle everything.
-- ARGV[12] e_device_owner  eO of the device owner
-- ARGV[13] token        claim token: one per Store.Claim call; once
--                       lua/give_back.lua has revoked it on a section's
--                       shard (the relay gave up on this claim's answer), a
--                       section that would grant stops before its first
--                       grant
-- ARGV[14] lease_max    the longest lease id the store accepts back
--                       (Options.MaxIDBytes): a minted id gets its job's
--                       site appended only within it (lib/store.lua)
-- ARGV[15] runner_mode  '' (Go handles the runner's records) | 'r' (the
--                       last two KEYS are the runner's; keep rsh) | 'R'
--                       (as 'r', and the presence record must hold
--                       device_owner and device)
-- ARGV[16] runner_shards  under runner_mode, each section's shard index,
--                       space-separated, as rsh names shards
-- ARGV[17..] rest       nk, then nk kinds (base64url, as the records' eK);
--                       ns, then per section: its number of keys; nr, then
--                       per route: eS, eO, nq_r; one cursor per queue key,
--                       in KEYS order: the seq of the last entry a previous
--                       call examined there, "" to start at the head; nl,
--                       then nl pre-minted lease ids (UUID v4 from Go, the
--                       section's shard in the first byte), at least
--                       min(remaining, 2*nr)
-- Reply: {status, grants, reports, scanned, truncated (1|0), quarantined,
--         cursors, stopped, empties, wrote, heads, now}
--   stopped   the section the call ended in (from 1); sections after it
--             were not run
--   status    'ok' | 'sweep' (that section settled nothing and changed
--             nothing: more was due than settle_budget) | 'revoked' (that
--             section granted nothing: its shard revoked the token) |
--             'presence' (runner_mode 'R': the presence record does not
--             hold this owner and device; nothing ran, stopped is 0)
--   empties   per section run, the queues (1-based, in its KEYS order)
--             that hold nothing when it ends: read from their head to
--             their end, every entry read taken out (granted, settled,
--             quarantined), in a section that repaired no index entry
--             (the work view's learning, Go's SawEmpty)
--   wrote     per section run, 1 when it may have written (it granted,
--             settled or repaired), else 0
--   heads     per section run, its due head when it ended ('-': nothing
--             indexed; '' when it stopped the call: 'sweep', 'revoked'),
--             the work view's due reading
--   now       the call's clock, ms (with the offset)
--   grants    per section run, its grants: {eS, stub (raw), leaseId,
--             expiresAt, deadline, seq}
--   truncated 1: the scan budget stopped the merge in that section with
--             candidates left; cursors (one per queue of that section, as
--             above) say where
--   report    {eS, eO, expiries} (Go decodes eS and eO)

local sections = tail(KEYS, 1)
local runner = ARGV[4]
local e_runner = ARGV[5]
local device_owner = ARGV[6]
local device = ARGV[7]
local lease_ms = tonumber(ARGV[8])
local remaining = tonumber(ARGV[9])
local scan_budget = tonumber(ARGV[10])
local settle_budget = tonumber(ARGV[11])
local e_device_owner = ARGV[12]
local token = ARGV[13]
local lease_max = tonumber(ARGV[14])
local runner_mode = ARGV[15]
local runner_shards = ARGV[16]
local rest = tail(ARGV, 17)

local record, shards_rec
local nsec = #sections
if runner_mode ~= '' then
  record, shards_rec = sections[nsec - 1], sections[nsec]
  nsec = nsec - 2
  if runner_mode == 'R' then
    local p = redis.call('HMGET', record, 'owner', 'device')
    if p[1] ~= device_owner or p[2] ~= device then
      return {'presence', {}, {}, 0, 0, 0, {}, 0, {}, {}, {}, 0}
    end
  end
end

local a = 1
local kinds = {}
local nk = tonumber(rest[a])
for i = 1, nk do
  kinds[rest[a + i]] = true
end
a = a + nk + 1
local ns = tonumber(rest[a])
a = a + 1

local now = clock()
local scanned, quarantined = 0, 0

-- due_head is the earliest due score in due_index, or nil when it holds
-- nothing.
local function due_head(due_index)
  local z = redis.call('ZRANGEBYSCORE', due_index, '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(z[2])
end

local function fill(q)
  local lo = '-inf'
  if q.last then
    lo = '(' .. q.last
  end
  local res = redis.call('ZRANGEBYSCORE', q.key, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 16)
  q.buf, q.i = {}, 1
  for i = 1, #res, 2 do
    q.buf[#q.buf + 1] = {res[i], tonumber(res[i + 1]), res[i + 1]}
  end
  q.short = #q.buf < 16 -- the queue held nothing past this buffer
  if #q.buf == 0 then
    q.done = true
  end
end

-- One section: keys is its KEYS, from its due index; a is where its ARGV
-- starts in rest. Answers status, grants, truncated, cursors, and where
-- the next section's ARGV starts.
local function section(keys, a)
  local due_index, lease, held = keys[1], keys[2], keys[3]
  local nr = tonumber(rest[a])
  a = a + 1

  local wrote = 0

  -- 1. Settle first (the reference sweeps at the top of every claim),
  -- bounded. The due head alone answers the usual case, nothing due, and
  -- is what the reply's heads report.
  local first = due_head(due_index)
  if first and first <= now then
    local due
    if settle_budget < 0 then
      due = redis.call('ZRANGEBYSCORE', due_index, '-inf', fmt(now))
    else
      due = redis.call('ZRANGEBYSCORE', due_index, '-inf', fmt(now), 'LIMIT', 0, settle_budget + 1)
      if #due > settle_budget then
        return 'sweep', {}, 0, {}, a, {}, 0, ''
      end
    end
    for _, m in ipairs(due) do
      settle(m, now, false)
      wrote = 1
    end
  end

  -- 2. Routes, their verified unsealed budgets, and their queues.
  local routes, queues = {}, {}
  local k = 4
  for r = 1, nr do
    local route = {eS = rest[a], eO = rest[a + 1], uns = keys[k], aw = keys[k + 1]}
    local nq = tonumber(rest[a + 2])
    a = a + 3
    local unsealed = 0
    for _, e_job in ipairs(redis.call('SMEMBERS', route.uns)) do
      if redis.call('HGET', jkey(route.eS .. ':' .. e_job), 'state') == AWAITING then
        unsealed = unsealed + 1
      else
        redis.call('SREM', route.uns, e_job) -- stale member; the set holds no counts
      end
    end
    route.budget = UNSEALED_PER_PAIR - unsealed
    routes[r] = route
    for i = 1, nq do
      queues[#queues + 1] = {key = keys[k + 1 + i], r = r, sticky = (i == nq), buf = {}, i = 1}
    end
    k = k + 2 + nq
  end
  for _, q in ipairs(queues) do
    if rest[a] ~= '' then
      q.last = rest[a]
    end
    q.from_head, q.kept = (rest[a] == ''), 0
    a = a + 1
  end
  local nl = tonumber(rest[a])
  local lease_at = a + 1
  a = a + 1 + nl

  -- 3. Merge the queues by seq and grant. A claim its relay gave up on
  -- (revoked token) grants nothing: its runner will never see the leases.
  -- Checked once a section, before its first grant, so a section that
  -- grants nothing pays nothing for it (one EXISTS, about 2-3 us); what it
  -- settled or repaired before is what any claim or sweep would have done.
  local revoked = nil
  local grants = {}
  local truncated = 0
  local repaired = false
  while remaining > 0 do
    local best
    for _, q in ipairs(queues) do
      if not q.done and routes[q.r].budget > 0 then
        if q.i > #q.buf then
          fill(q)
        end
        if not q.done and (not best or q.buf[q.i][2] < best.buf[best.i][2]) then
          best = q
        end
      end
    end
    if not best then
      break
    end
    if scanned >= scan_budget then
      truncated = 1
      break
    end
    scanned = scanned + 1
    local entry = best.buf[best.i]
    best.i = best.i + 1
    best.last = entry[3]
    local e_job = entry[1]
    local route = routes[best.r]
    local m = route.eS .. ':' .. e_job
    local h = core(m)

    if not h or h.state ~= QUEUED or h.cx == '1' or h.bad == '1'
        or (best.sticky and h.ero ~= e_runner) or (not best.sticky and h.ero) then
      -- The index disagrees with the record: repair it, never trust it.
      repaired, wrote = true, 1
      redis.call('ZREM', best.key, e_job)
      if h and h.state == QUEUED and h.cx ~= '1' then
        local qk, qm = queue_of(h)
        redis.call('ZADD', qk, h.seq, qm)
      end
    elseif tonumber(h.dl) <= now then
      settle(m, now, false, h)
      wrote = 1
    else
      local ok = true
      if best.sticky then
        -- sticky queues mix kinds and audiences; ready queues are split by both
        ok = kinds[h.eK] and (h.eA ~= PRIVATE_EA or h.eO == e_device_owner)
      end
      local jk = jkey(m)
      if ok and redis.call('ZSCORE', jk .. ':ref', runner) then
        ok = false
      end
      if ok then
        local ra = redis.call('HGET', jk .. ':ra', runner)
        if ra and tonumber(ra) > now then
          ok = false
        end
      end
      if not ok then
        best.kept = best.kept + 1 -- stays queued for other runners
      end
      if ok then
        local stub = get_blob(jk, 'stub', 8)
        if not valid_stub(stub) then
          -- §3.5: stays queued and readable, out of every ready queue.
          redis.call('ZREM', best.key, e_job)
          redis.call('HSET', jk, 'bad', '1')
          redis.call('ZADD', P .. 'bad', h.seq, m)
          quarantined = quarantined + 1
          wrote = 1
        else
          if revoked == nil then
            revoked = redis.call('EXISTS', P .. 'gb:' .. token) == 1
          end
          if revoked then
            return 'revoked', {}, 0, {}, a, {}, wrote, ''
          end
          if #grants >= nl then
            error(redis.error_reply('ERR relay: claim: ran out of pre-minted lease ids'))
          end
          local minted = rest[lease_at + #grants]
          local lease_id = minted
          if #minted + 1 + #h.eS <= lease_max then
            lease_id = minted .. '.' .. h.eS
          end
          local expires = fmt(now + lease_ms)
          local until_ = fmt(now + AWAITING_MS)
          local rec = {'state', AWAITING, 'cr', runner, 'ecr', e_runner,
            'co', device_owner, 'cl', lease_id, 'ce', expires, 'au', until_}
          blob_args('cd', device, rec)
          redis.call('HSET', jk, unpack(rec))
          redis.call('ZREM', best.key, e_job)
          move_state(m, QUEUED, AWAITING)
          redis.call('SADD', route.uns, e_job)
          redis.call('ZADD', route.aw, h.seq, e_job)
          redis.call('HSET', lease, lease_id, m)
          redis.call('ZADD', held, 0, e_job .. ':' .. route.eS)
          h.state, h.cl, h.ce, h.au = AWAITING, lease_id, expires, until_
          rescore(m, h)
          route.budget = route.budget - 1
          remaining = remaining - 1
          grants[#grants + 1] = {h.eS, stub, lease_id, expires, h.dl, h.seq}
          wrote = 1
        end
      end
    end
  end

  local cursors, empties = {}, {}
  for i, q in ipairs(queues) do
    cursors[i] = q.last or ''
    if (q.done or (q.short and q.i > #q.buf)) and q.from_head and q.kept == 0 and not repaired then
      empties[#empties + 1] = i
    end
  end
  if wrote == 1 then
    first = due_head(due_index)
  end
  local head = first and fmt(first) or '-'
  return 'ok', grants, truncated, cursors, a, empties, wrote, head
end

local all, all_empties, all_wrote, all_heads, k = {}, {}, {}, {}, 1
local status, truncated, cursors, stopped = 'ok', 0, {}, 0
for s = 1, ns do
  local nkeys = tonumber(rest[a])
  if not nkeys or nkeys < 3 or k + nkeys - 1 > nsec then
    return redis.error_reply('ERR relay: claim: section ' .. s .. ' names keys KEYS does not hold')
  end
  local keys = {}
  for i = 1, nkeys do
    keys[i] = sections[k + i - 1]
  end
  k = k + nkeys
  local grants, empties, wrote, head
  if remaining <= 0 and tonumber(rest[a + 1]) > 0 then
    -- Every grant is made: a section with routes has nothing to do. Skip
    -- its ARGV (nr, 3 a route, a cursor a queue, nl and the lease ids).
    local nr = tonumber(rest[a + 1])
    local b, nq = a + 2, 0
    for _ = 1, nr do
      nq = nq + tonumber(rest[b + 2])
      b = b + 3
    end
    b = b + nq
    a = b + 1 + tonumber(rest[b])
    grants, empties, wrote, head = {}, {}, 0, ''
  else
    status, grants, truncated, cursors, a, empties, wrote, head = on_shard(keys[1], function()
      return section(keys, a + 1)
    end)
  end
  stopped = s
  all[s], all_empties[s], all_wrote[s], all_heads[s] = grants, empties, wrote, head
  if status ~= 'ok' or truncated == 1 then
    break
  end
end

if runner_mode ~= '' then
  -- What runner_shards_add would write, unless rsh already covers every
  -- shard granted on until its new deadline and no nr stands (Go's
  -- shardsRecorded over the same two records, read here instead).
  local shard_of = {}
  for sh in string.gmatch(runner_shards, '%S+') do
    shard_of[#shard_of + 1] = sh
  end
  local by_shard, members = {}, {}
  for s, grants in ipairs(all) do
    local latest = 0
    for _, g in ipairs(grants) do
      latest = math.max(latest, tonumber(g[5]))
    end
    if latest > 0 then
      if not shard_of[s] then
        return redis.error_reply('ERR relay: claim: runner_shards names no shard for section ' .. s)
      end
      by_shard[#by_shard + 1] = shard_of[s]
      by_shard[#by_shard + 1] = fmt(math.ceil(latest / RUNNER_SHARDS_GRAIN) * RUNNER_SHARDS_GRAIN)
      members[#members + 1] = shard_of[s]
    end
  end
  if #members > 0 then
    local p = redis.call('HMGET', record, 'owner', 'ld')
    local covered = p[1] and not (p[2] and string.find(p[2], ':', 1, true))
    if covered then
      local at = redis.call('ZMSCORE', shards_rec, unpack(members))
      for i, sc in ipairs(at) do
        if not sc or tonumber(sc) < tonumber(by_shard[2 * i]) then
          covered = false
          break
        end
      end
    end
    if not covered then
      record_runner_shards(shards_rec, record, by_shard)
    end
  end
end
return {status, all, REPORTS, scanned, truncated, quarantined, cursors, stopped, all_empties, all_wrote, all_heads, now}
