-- presence_backfill: index in ls the presence records of one shard that
-- relays before the retention index wrote and that have not beaten since
-- (a beat indexes its record itself), one page of the runner index pidx
-- at a time, so a record that never beats again still ends. The shard's
-- cursor lsfill holds the pidx score of the last entry examined, "done"
-- when the whole index has been read; nothing reads it after that.
-- An entry whose record is gone leaves pidx (as presence_all would do).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  index
-- KEYS[2]  retention_index
-- KEYS[3]  lsfill      (STR cursor)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  limit       most entries examined (1..1000)
-- Reply: {entries indexed, 1 when the shard is done (now or before)}

local index = KEYS[1]
local retention_index = KEYS[2]
local lsfill = KEYS[3]
local limit = tonumber(ARGV[4])

if not limit or limit < 1 or limit > 1000 then
  return redis.error_reply('ERR relay: presence_backfill: the limit is 1..1000')
end
local from = redis.call('GET', lsfill)
if from == 'done' then
  return {0, 1}
end
local min = '-inf'
if from then
  min = '(' .. from
end
local page = redis.call('ZRANGEBYSCORE', index, min, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local n = 0
for i = 1, #page, 2 do
  local eR = page[i]
  local kp = P .. 'p:' .. eR
  local f = redis.call('HMGET', kp, 'lastSeenAt', 'lx')
  if not f[1] then
    redis.call('ZREM', index, eR)
  elseif not f[2] then
    redis.call('ZADD', retention_index, f[1], eR)
    redis.call('HSET', kp, 'lx', f[1])
    n = n + 1
  end
end
if #page < 2 * limit then
  redis.call('SET', lsfill, 'done')
  return {n, 1}
end
redis.call('SET', lsfill, page[#page])
return {n, 0}
