-- presence_beat: the idle heartbeat of devices the replica remembers, for
-- one shard, in short form. A record is written only if it still holds
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
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s on a cluster (Go groups records by shard there); every other key is in KEYS, none is built
--       from a prefix. On a server that is not a cluster Go sends the records of every shard in one call
--       (internal/store batch.go groupByShard): the script reads and writes only the keys it is given.
-- KEYS[1..] records     per record i (from 0), 3 keys at records[1+3i..3+3i]:
--                       p:<eR>, rsh:<eR>, and ls, the retention index of the
--                       record's shard (lib/presence.lua index_seen)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  ttl          ms ("0": records never expire)
-- ARGV[5]  stands       ms for which a read of rsh that found no live grant stands
-- ARGV[6..] values      per record i, 2 values at values[1+2i..2+2i]: the
--                       heartbeat digest (of owner, device and the two
--                       lists), "1" to answer the rsh record (else "")
-- Reply: {lastSeenAt written (the call's one clock reading), then one entry
--         per record, in order: 0 when it was not written, else the shard
--         indexes of its rsh record, space-separated ("" when not asked,
--         none, or none live)}

local records = tail(KEYS, 1)
local ttl = ARGV[4]
local stands = tonumber(ARGV[5])
local values = tail(ARGV, 6)

local n = #values / 2
if n < 1 or n > 64 or n ~= math.floor(n) or #records ~= 3 * n then
  return redis.error_reply('ERR relay: presence_beat: KEYS and ARGV do not hold n records')
end
local at = clock()
local now = fmt(at)
local out = {now}
for i = 0, n - 1 do
  local kp, a = records[1 + 3 * i], 1 + 2 * i
  local d = values[a]
  -- One read: ld is the heartbeat digest, alone or followed by ":" and
  -- nr (lib/presence.lua holds_digest); lx is when the retention index
  -- last took the record (index_seen).
  local f = redis.call('HMGET', kp, 'ld', 'lx')
  local nr = holds_digest(f[1], d)
  if nr == nil then
    out[i + 2] = 0
  else
    local shards, read, live = '', false, false
    if values[a + 1] == '1' and not (nr and at - nr < stands) then
      local z = redis.call('ZRANGE', records[2 + 3 * i], 0, -1, 'WITHSCORES')
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
    index_seen(kp, records[3 + 3 * i], string.match(kp, '}:p:(.*)$'), f[2], now)
    if ttl ~= '0' then
      redis.call('PEXPIRE', kp, ttl)
    end
    out[i + 2] = shards
  end
end
return out
