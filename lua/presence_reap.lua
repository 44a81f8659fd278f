-- presence_reap: forget the devices of one shard that have been silent
-- longer than the retention (the sweep's part of "every record has an
-- end", internal/store doc.go). Reads only the head of the shard's
-- retention index ls (eR -> an instant at most an hour before the
-- record's lastSeenAt, lib/presence.lua index_seen), never the dataset:
-- at most ARGV[5] entries whose score is before now - retention. Each
-- is decided on its record: one that beat since is moved forward in the
-- index and kept; one whose lastSeenAt is before the cut (or that is
-- gone) loses, in this one call, its record, its owner-index entry, its
-- pidx and ls entries and its record of shards (forget_runner).
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  retention_index  ls (ZSET eR -> last indexed instant, ms)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  retention   retention ms (> 0)
-- ARGV[5]  limit       most index entries examined (1..1000)
-- Reply: {records forgotten, entries moved forward, 1 if more entries
--         may be due (the limit was reached) else 0}

local retention_index = KEYS[1]
local retention = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])

if not retention or retention <= 0 or not limit or limit < 1 or limit > 1000 then
  return redis.error_reply('ERR relay: presence_reap: retention must be positive and the limit 1..1000')
end
local now = clock()
local cut = now - retention
local due = redis.call('ZRANGEBYSCORE', retention_index, '-inf', '(' .. fmt(cut), 'LIMIT', 0, limit)
local gone, kept = 0, 0
for _, eR in ipairs(due) do
  local kp = P .. 'p:' .. eR
  local seen = tonumber(redis.call('HGET', kp, 'lastSeenAt') or '')
  if seen and seen >= cut then
    redis.call('ZADD', retention_index, fmt(seen), eR)
    redis.call('HSET', kp, 'lx', fmt(seen))
    kept = kept + 1
  else
    forget_runner(P, eR, now)
    gone = gone + 1
  end
end
local more = 0
if #due == limit then
  more = 1
end
return {gone, kept, more}
