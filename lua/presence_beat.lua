-- presence_beat: the heartbeats of devices the replica remembers, in
-- short form. A record is written only if it still holds
-- the owner, device and lists the heartbeat carries, which the caller
-- names by one digest of all four (the record keeps it in field ld,
-- written by seen_record, lib/presence.lua); then only lastSeenAt (and the
-- expiry) is written, exactly what presence_seen writes for such a
-- record. A record that does not match (gone, another device, other
-- lists, or written by a relay that kept an older digest there) is left
-- as it is and answered 0: the caller sends that heartbeat again in full
-- (presence_seen), which decides it. So the device JSON and the two lists
-- cross to the server only when something changed, not on every tick of
-- an idle fleet, and a record costs one field read.
--
-- The runner's record of shards (rsh) answers the cancel requests. Most
-- devices hold no grant whose deadline is still ahead, and reading rsh on
-- every tick was a third of an idle heartbeat's commands, so the record
-- remembers when rsh last held none (nr, the instant of that read, kept
-- after the digest in ld as "<digest>:<nr>" so the same one read has it);
-- until stands ms after it rsh is not read again and the answer is "".
-- Every grant drops nr in the same call that adds to rsh
-- (runner_shards_add), so a new grant is seen on the next heartbeat; the
-- re-read after stands bounds how late a grant written without dropping
-- nr (a relay of an earlier version, during a rolling upgrade) is seen. A
-- shard in rsh whose latest grant deadline has passed holds nothing a
-- heartbeat reports (cancel requests last until the job's deadline), so
-- such a set counts as holding none.
--
-- Renewals ride along on a server that is not a cluster. A busy device's
-- heartbeat also renews the grants it reports (renew.lua, §2.14), which
-- was a second script call, and most of a job's calls beyond its five
-- transitions. Go adds them to the record's entry here (internal/store
-- Heartbeat), only where no slot has to be kept: each grant names its
-- shard's lease index among KEYS, and it is resolved and renewed with P
-- set to that key's prefix (on_shard, lib/common.lua), by the decision
-- renew.lua makes there (renew_grant, lib/store.lua). Renewals run only when the record is written, so
-- a heartbeat whose record changed renews nothing (Go then decides it in
-- full, as before). A cluster, and a heartbeat in full form, renew with
-- renew.lua after the presence write.
--
-- lib: blob
-- lib: store
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s on a cluster (Go groups records by shard there, and sends no renewals); every other key is
--       in KEYS or, for a renewal, built from its lease index's prefix. On a server that is not a cluster Go
--       sends the records of every shard in one call (internal/store batch.go groupByShard): the script reads
--       and writes only the keys it is given and those of the renewals' shards.
-- KEYS[1..] keys        per record i (from 0), 3 keys at keys[1+3i..3+3i]:
--                       p:<eR>, rsh:<eR>, and ls, the retention index of the
--                       record's shard (lib/presence.lua index_seen); after
--                       the records, the lease indexes the renewals name
-- ARGV[1..3] common  prefix, offset, flags (churn and announce, for a renewal's settling)
-- ARGV[4]  ttl          ms ("0": records never expire)
-- ARGV[5]  stands       ms for which a read of rsh that found no live grant stands
-- ARGV[6]  n            how many records (1..64)
-- ARGV[7..] values      per record, in order: the heartbeat digest (of owner,
--                       device and the two lists), "1" to answer the rsh
--                       record (else ""), g, how many grants to renew
--                       (0..32); when g > 0 the runner id, the lease to
--                       grant (ms), then g triples:
--                       the grant's lease index (its place among the lease
--                       indexes in KEYS, from 1), eJ, leaseId
-- Reply: {lastSeenAt written (the call's one clock reading), the renewals'
--         churn reports (lib/common.lua REPORTS), then one entry per record,
--         in order: 0 when it was not written (nothing renewed), else the
--         shard indexes of its rsh record, space-separated ("" when not
--         asked, none, or none live), or with g > 0 {those indexes, {per
--         grant the new expiry, or "" when the runner no longer holds it}}}

local keys = tail(KEYS, 1)
local ttl = ARGV[4]
local stands = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local values = tail(ARGV, 7)

if not n or n < 1 or n > 64 or n ~= math.floor(n) or #keys < 3 * n then
  return redis.error_reply('ERR relay: presence_beat: KEYS and ARGV do not hold n records')
end
local leases = #keys - 3 * n
local at = clock()
local now = fmt(at)
local out = {now, REPORTS}
local v = 1
for i = 0, n - 1 do
  local kp = keys[1 + 3 * i]
  local d, ask, g = values[v], values[v + 1], tonumber(values[v + 2])
  if not g or g < 0 or g > 32 or g ~= math.floor(g) then
    return redis.error_reply('ERR relay: presence_beat: record ' .. i .. ' names a bad count of grants')
  end
  local runner, lease_ms, first = nil, nil, v + 5
  if g > 0 then
    runner, lease_ms = values[v + 3], tonumber(values[v + 4])
    if not lease_ms then
      return redis.error_reply('ERR relay: presence_beat: record ' .. i .. ' names no lease length')
    end
    v = v + 5 + 3 * g
  else
    v = v + 3
  end
  if v - 1 > #values then
    return redis.error_reply('ERR relay: presence_beat: ARGV ends inside record ' .. i)
  end
  -- One read: ld is the heartbeat digest, alone or followed by ":" and
  -- nr (lib/presence.lua holds_digest); lx is when the retention index
  -- last took the record (index_seen).
  local f = redis.call('HMGET', kp, 'ld', 'lx')
  local nr = holds_digest(f[1], d)
  if nr == nil then
    out[#out + 1] = 0
  else
    local shards, read, live = '', false, false
    if ask == '1' and not (nr and at - nr < stands) then
      local z = redis.call('ZRANGE', keys[2 + 3 * i], 0, -1, 'WITHSCORES')
      local names = {}
      for j = 1, #z, 2 do
        names[#names + 1] = z[j]
        live = live or tonumber(z[j + 1]) > at
      end
      shards, read = table.concat(names, ' '), true
    end
    if read and not live then
      redis.call('HSET', kp, 'lastSeenAt', now, 'ld', d .. ':' .. now)
    elseif read and nr then
      -- nr had lapsed and rsh holds a live grant.
      redis.call('HSET', kp, 'lastSeenAt', now, 'ld', d)
    else
      redis.call('HSET', kp, 'lastSeenAt', now)
    end
    index_seen(kp, keys[3 + 3 * i], string.match(kp, '}:p:(.*)$'), f[2], now)
    if ttl ~= '0' then
      redis.call('PEXPIRE', kp, ttl)
    end
    if g == 0 then
      out[#out + 1] = shards
    else
      local renewed = {}
      for j = 0, g - 1 do
        local t = first + 3 * j
        local which = tonumber(values[t])
        if not which or which < 1 or which > leases or which ~= math.floor(which) then
          return redis.error_reply('ERR relay: presence_beat: a grant names no lease index in KEYS')
        end
        local e_job, lease_id = values[t + 1], values[t + 2]
        renewed[j + 1] = on_shard(keys[3 * n + which], function()
          return renew_grant(e_job, lease_id, runner, at, lease_ms)
        end)
      end
      out[#out + 1] = {shards, renewed}
    end
  end
end
if v - 1 ~= #values then
  return redis.error_reply('ERR relay: presence_beat: ARGV holds more than n records')
end
return out
