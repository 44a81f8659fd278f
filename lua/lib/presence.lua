-- lib/presence.lua: one heartbeat's write to a presence record, shared by
-- presence_seen (one record) and presence_seen_batch (several records of
-- one shard in one call). The caller reads the clock once and passes now.
--
-- An existing record keeps its owner and device; only lastSeenAt,
-- capabilities and withheld are replaced (never merged; an empty array is
-- a value). The record keeps in field ld the heartbeat digest, one digest
-- of owner, device and the two lists (computed by the caller): when a
-- heartbeat of the record's own device carries the lists the record
-- already holds, which is almost every idle tick, only lastSeenAt and the
-- expiry are written. presence_beat, an idle heartbeat's short form,
-- checks that digest instead of receiving the device and lists, and may
-- keep after it ":" and nr (see there), which this write leaves as it is
-- unless the lists change.
--
-- A record whose ld holds anything else (written by a relay that kept only
-- the lists' digest there, or never had one) differs from every digest:
-- its lists are rewritten once and that relay's od and nr fields dropped.
-- A heartbeat of another device replaces the lists but not the owner and
-- device, so the record's digest then names no heartbeat ('-'): the next
-- one, of whichever device, goes in full.
--
-- holds_digest(ld, d): whether a record's ld holds the heartbeat digest d,
-- alone or followed by ":" and nr; then nr (a number) or false. nil when
-- it does not (another digest, '-', an earlier relay's form, or none).
local function holds_digest(ld, d)
  if not ld or #d == 0 or string.sub(ld, 1, #d) ~= d then
    return nil
  end
  if #ld == #d then
    return false
  end
  if string.byte(ld, #d + 1) ~= 58 then
    return nil
  end
  return tonumber(string.sub(ld, #d + 2)) or nil
end

-- The retention index: ls (per shard, beside pidx) is a ZSET eR -> an
-- instant at most LS_STEP_MS before the record's lastSeenAt, so the sweep
-- (presence_reap) reads only the records that may be due. A heartbeat
-- writes it when the record's lx field (the score last written there) is
-- absent or LS_STEP_MS old, so an idle device's beat adds a write to it
-- about once an hour, not on every tick. The sweep never trusts the score
-- alone: it reads lastSeenAt and moves a record that beat since forward.
local LS_STEP_MS = 3600000

-- index_seen(kp, kls, eR, lx, now): the retention index kls (the
-- record's shard's ls) after a heartbeat of record kp whose lx field read
-- lx (nil or a string).
local function index_seen(kp, kls, eR, lx, now)
  if lx and tonumber(now) - (tonumber(lx) or 0) < LS_STEP_MS then
    return
  end
  redis.call('ZADD', kls, now, eR)
  redis.call('HSET', kp, 'lx', now)
end

-- b64url(s): base64url without padding, the key-part encoding (enc in
-- internal/store keys.go), for the owner's index key of a record that
-- holds its owner raw.
local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
local function b64url(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = string.byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = {math.floor(n / 262144) % 64, math.floor(n / 4096) % 64, math.floor(n / 64) % 64, n % 64}
    local keep = 4
    if not b then
      keep = 2
    elseif not c then
      keep = 3
    end
    for j = 1, keep do
      out[#out + 1] = string.sub(B64, q[j] + 1, q[j] + 1)
    end
  end
  return table.concat(out)
end

-- forget_runner(pre, eR, now): everything of runner eR on its own shard
-- (prefix pre): its presence record, its owner-index entry, its runner
-- index and retention index entries, and its record of shards unless that
-- still names a grant whose deadline is ahead (then only its lapsed
-- shards go, and the key expires at its latest deadline: cancel requests
-- and the bare-id probe need it no longer than that). Its grants on other
-- shards (hid, cxl) end with their jobs. Returns 1 if a record was there.
local function forget_runner(pre, eR, now)
  local kp = pre .. 'p:' .. eR
  local owner = redis.call('HGET', kp, 'owner')
  if owner then
    redis.call('SREM', pre .. 'po:' .. b64url(owner), eR)
    redis.call('DEL', kp)
  end
  redis.call('ZREM', pre .. 'pidx', eR)
  redis.call('ZREM', pre .. 'ls', eR)
  local krsh = pre .. 'rsh:' .. eR
  redis.call('ZREMRANGEBYSCORE', krsh, '-inf', fmt(now))
  local last = redis.call('ZRANGE', krsh, -1, -1, 'WITHSCORES')
  local hi = tonumber(last[2] or '')
  if hi then
    redis.call('PEXPIREAT', krsh, fmt(hi))
  end
  if owner then
    return 1
  end
  return 0
end

-- seen_record(p, pidx, pseq, po, rsh, v, i, now): the record's keys (rsh
-- may be nil: not read) and, from v[i], its nine values: eR, runnerId,
-- owner, device, capabilities, withheld, ttl ms, digest, condition. Read
-- from v in place rather than copied into tables of their own: this runs
-- once per heartbeat of an idle fleet. With condition "1" the record must already
-- exist holding exactly owner and device, else nothing is written and the
-- reply is {}.
-- Reply: the record as a flat array without its two lists (under the
-- condition only lastSeenAt: the caller sent the rest, and the condition
-- held), plus "rsh" and the shard indexes read from rsh when it is given.
local function seen_record(kp, kidx, kseq, kpo, krsh, v, i, now)
  -- One read is both the existence check and the reply's fields: a
  -- record always has an owner (presence_seen is its only writer), and
  -- its runnerId is the one its key names, v[i + 1].
  local r = redis.call('HMGET', kp, 'owner', 'device', 'ld', 'lx')
  local same = r[1] == v[i + 2] and r[2] == v[i + 3]
  local cond = v[i + 8] == '1'
  if cond and not same then
    return {}
  end
  local d = v[i + 7]
  if r[1] then
    local ld = r[3]
    if same and holds_digest(ld, d) ~= nil then
      -- Same device, same lists: the owner's index already names this
      -- record (it was added with the record or with the lists, and only a
      -- gone record or another owner's entry is ever dropped from it).
      redis.call('HSET', kp, 'lastSeenAt', now)
    else
      if not same then
        d = '-'
      elseif ld and #ld ~= #d and string.byte(ld, #d + 1) ~= 58 then
        redis.call('HDEL', kp, 'od', 'nr')
      end
      redis.call('HSET', kp, 'capabilities', v[i + 4], 'withheld', v[i + 5], 'ld', d, 'lastSeenAt', now)
      redis.call('SADD', kpo, v[i])
    end
  else
    redis.call('HSET', kp, 'runnerId', v[i + 1], 'owner', v[i + 2], 'device', v[i + 3],
      'capabilities', v[i + 4], 'withheld', v[i + 5], 'ld', d, 'lastSeenAt', now)
    -- A new record goes to the end of the listing, even if an index entry
    -- of a lost record lingers (everyone() cleans those).
    redis.call('ZADD', kidx, next_seq(kseq), v[i])
    r = {v[i + 2], v[i + 3]}
    redis.call('SADD', kpo, v[i])
  end
  index_seen(kp, string.match(kp, '^[^{]*{[^}]*}:') .. 'ls', v[i], r[4], now)
  if v[i + 6] ~= '0' then
    redis.call('PEXPIRE', kp, v[i + 6])
  end
  local rsh = krsh and table.concat(redis.call('ZRANGE', krsh, 0, -1), ' ')
  if cond then
    if rsh then
      return {'lastSeenAt', now, 'rsh', rsh}
    end
    return {'lastSeenAt', now}
  end
  if rsh then
    return {'runnerId', v[i + 1], 'owner', r[1], 'device', r[2], 'lastSeenAt', now, 'rsh', rsh}
  end
  return {'runnerId', v[i + 1], 'owner', r[1], 'device', r[2], 'lastSeenAt', now}
end

-- record_runner_shards(shards, record, by_shard): the runner's record of
-- shards (rsh, key shards) takes each shard of by_shard (pairs: shard
-- index, latest deadline of its new grants, ms, rounded up) at that
-- deadline or later, ends ten minutes past its latest one, and the
-- runner's presence record (key record) drops the ":nr" its ld may carry,
-- so its heartbeats read rsh again. Shared by runner_shards_add and a
-- claim that carries the runner's keys. Answers the number of shards rsh
-- gained.
local function record_runner_shards(shards, record, by_shard)
  local args = {}
  local hi = 0
  for i = 1, #by_shard, 2 do
    args[#args + 1] = by_shard[i + 1]
    args[#args + 1] = by_shard[i]
    hi = math.max(hi, tonumber(by_shard[i + 1]) or 0)
  end
  local added = redis.call('ZADD', shards, 'GT', unpack(args))
  -- Ten minutes past the latest deadline: nothing rsh names is reported
  -- past a deadline (cancel requests), so it ends even when the presence
  -- record went first and nothing else would delete it.
  local last = redis.call('ZRANGE', shards, -1, -1, 'WITHSCORES')
  hi = math.max(hi, tonumber(last[2] or '') or 0)
  redis.call('PEXPIREAT', shards, fmt(hi + 600000))
  local ld = redis.call('HGET', record, 'ld')
  local cut = ld and string.find(ld, ':', 1, true)
  if cut then
    redis.call('HSET', record, 'ld', string.sub(ld, 1, cut - 1))
  end
  return added
end
