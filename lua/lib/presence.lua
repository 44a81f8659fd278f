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
-- The record also keeps od, a digest of its owner and device (computed by
-- the caller, like ld), written whenever the record's owner and device are
-- the ones the heartbeat carries: presence_beat, an idle heartbeat's short
-- form, checks od and ld instead of receiving the device and lists. The
-- owner and device of a record never change (only presence_drop removes
-- it), so od never goes stale; a record without od (older than it) fails
-- presence_beat's check once, and this write gives it one.
--
-- seen_record(p, pidx, pseq, po, rsh, i, now): the record's keys (rsh may
-- be nil: not read) and, from ARGV[i], its ten values: eR, runnerId,
-- owner, device, capabilities, withheld, ttl ms, digest, condition, od. Read
-- from ARGV in place rather than copied into tables: this runs once per
-- heartbeat of an idle fleet. With condition "1" the record must already
-- exist holding exactly owner and device, else nothing is written and the
-- reply is {}.
-- Reply: the record as a flat array without its two lists (under the
-- condition only lastSeenAt: the caller sent the rest, and the condition
-- held), plus "rsh" and the shard indexes read from rsh when it is given.
local function seen_record(kp, kidx, kseq, kpo, krsh, i, now)
  -- One read is both the existence check and the reply's fields: a
  -- record always has an owner (presence_seen is its only writer), and
  -- its runnerId is the one its key names, ARGV[i + 1].
  local r = redis.call('HMGET', kp, 'owner', 'device', 'ld', 'od')
  local same = r[1] == ARGV[i + 2] and r[2] == ARGV[i + 3]
  local cond = ARGV[i + 8] == '1'
  if cond and not same then
    return {}
  end
  if r[1] then
    local w = {'lastSeenAt', now}
    if same and r[4] ~= ARGV[i + 9] then
      w[3], w[4] = 'od', ARGV[i + 9]
    end
    if r[3] == ARGV[i + 7] then
      -- Same lists: the owner's index already names this record (it was
      -- added with the record or with the lists, and only a gone record or
      -- another owner's entry is ever dropped from it).
      redis.call('HSET', kp, unpack(w))
    else
      redis.call('HSET', kp, 'capabilities', ARGV[i + 4], 'withheld', ARGV[i + 5], 'ld', ARGV[i + 7], unpack(w))
      redis.call('SADD', kpo, ARGV[i])
    end
  else
    redis.call('HSET', kp, 'runnerId', ARGV[i + 1], 'owner', ARGV[i + 2], 'device', ARGV[i + 3],
      'capabilities', ARGV[i + 4], 'withheld', ARGV[i + 5], 'ld', ARGV[i + 7], 'od', ARGV[i + 9], 'lastSeenAt', now)
    -- A new record goes to the end of the listing, even if an index entry
    -- of a lost record lingers (everyone() cleans those).
    redis.call('ZADD', kidx, next_seq(kseq), ARGV[i])
    r = {ARGV[i + 2], ARGV[i + 3]}
    redis.call('SADD', kpo, ARGV[i])
  end
  if ARGV[i + 6] ~= '0' then
    redis.call('PEXPIRE', kp, ARGV[i + 6])
  end
  local rsh = krsh and table.concat(redis.call('ZRANGE', krsh, 0, -1), ' ')
  if cond then
    if rsh then
      return {'lastSeenAt', now, 'rsh', rsh}
    end
    return {'lastSeenAt', now}
  end
  if rsh then
    return {'runnerId', ARGV[i + 1], 'owner', r[1], 'device', r[2], 'lastSeenAt', now, 'rsh', rsh}
  end
  return {'runnerId', ARGV[i + 1], 'owner', r[1], 'device', r[2], 'lastSeenAt', now}
end
