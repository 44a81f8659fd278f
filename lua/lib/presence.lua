-- lib/presence.lua: one heartbeat's write to a presence record, shared by
-- presence_seen (one record) and presence_seen_batch (several records of
-- one shard in one call). The caller reads the clock once and passes now.
--
-- An existing record keeps its owner and device; only lastSeenAt,
-- capabilities and withheld are replaced (never merged; an empty array is
-- a value). The record keeps a digest of the two lists (field ld): when a
-- heartbeat carries the lists the record already holds, which is almost
-- every idle tick, only lastSeenAt and the expiry are written. A record
-- without ld (written before it existed) differs from every digest, so its
-- lists are rewritten once.
--
-- k: the record's keys {p, pidx, pseq, po, rsh (or nil)}; a: its values
-- {eR, runnerId, owner, device, capabilities, withheld, ttl ms, digest,
-- condition}. With condition "1" the record must already exist holding
-- exactly owner and device, else nothing is written and the reply is {}.
-- Reply: the record as a flat array without its two lists (under the
-- condition only lastSeenAt: the caller sent the rest, and the condition
-- held), plus "rsh" and the shard indexes of k[5] when k[5] is given.
local function seen_record(k, a, now)
  -- One read is both the existence check and the reply's fields: a record
  -- always has runnerId.
  local r = redis.call('HMGET', k[1], 'runnerId', 'owner', 'device', 'ld')
  if a[9] == '1' and (not r[1] or r[2] ~= a[3] or r[3] ~= a[4]) then
    return {}
  end
  if r[1] then
    if r[4] == a[8] then
      -- Same lists: the owner's index already names this record (it was
      -- added with the record or with the lists, and only a gone record or
      -- another owner's entry is ever dropped from it).
      redis.call('HSET', k[1], 'lastSeenAt', now)
    else
      redis.call('HSET', k[1], 'lastSeenAt', now, 'capabilities', a[5], 'withheld', a[6], 'ld', a[8])
      redis.call('SADD', k[4], a[1])
    end
  else
    redis.call('HSET', k[1], 'runnerId', a[2], 'owner', a[3], 'device', a[4],
      'capabilities', a[5], 'withheld', a[6], 'ld', a[8], 'lastSeenAt', now)
    -- A new record goes to the end of the listing, even if an index entry
    -- of a lost record lingers (everyone() cleans those).
    redis.call('ZADD', k[2], next_seq(k[3]), a[1])
    r = {a[2], a[3], a[4]}
    redis.call('SADD', k[4], a[1])
  end
  if a[7] ~= '0' then
    redis.call('PEXPIRE', k[1], a[7])
  end
  local out
  if a[9] == '1' then
    out = {'lastSeenAt', now}
  else
    out = {'runnerId', r[1], 'owner', r[2], 'device', r[3], 'lastSeenAt', now}
  end
  if k[5] then
    out[#out + 1] = 'rsh'
    out[#out + 1] = table.concat(redis.call('ZRANGE', k[5], 0, -1), ' ')
  end
  return out
end
