-- place_backfill: index in placet the sites of the placement record that
-- relays before the index placed and no replica has read since (a read
-- through place.lua indexes its site itself), one HSCAN page of place at a
-- time, so a site never used again still ends (place_reap.lua). Each is
-- indexed as read now: it is forgotten a whole retention later at the
-- earliest. The cursor placetfill holds HSCAN's cursor, "done" when the
-- whole record has been read; nothing reads it after that.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  place       HASH  site id (raw) -> shard index
-- KEYS[2]  placet      ZSET  site id (raw) -> its last read (ms)
-- KEYS[3]  placetfill  STR   the HSCAN cursor, or "done"
-- ARGV[1..3] common  prefix, offset (unused: real time), flags (unused)
-- ARGV[4]  limit       HSCAN's COUNT (1..1000)
-- Reply: {sites indexed, 1 when the record is done (now or before)}

local place = KEYS[1]
local placet = KEYS[2]
local placetfill = KEYS[3]
local limit = tonumber(ARGV[4])

if not limit or limit < 1 or limit > 1000 then
  return redis.error_reply('ERR relay: place_backfill: the limit is 1..1000')
end
local from = redis.call('GET', placetfill)
if from == 'done' then
  return {0, 1}
end
-- Real time (TIME), not the store clock with its test offset: replicas
-- age their cached placements by their own clocks (internal/layout).
local t = redis.call('TIME')
local now = fmt(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local page = redis.call('HSCAN', place, from or '0', 'COUNT', limit)
local n = 0
local fields = page[2]
for i = 1, #fields, 2 do
  n = n + redis.call('ZADD', placet, 'NX', now, fields[i])
end
if page[1] == '0' then
  redis.call('SET', placetfill, 'done')
  return {n, 1}
end
redis.call('SET', placetfill, page[1])
return {n, 0}
