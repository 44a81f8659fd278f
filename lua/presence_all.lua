-- presence_all: one page of every record in insertion order (§2.16). Index
-- entries whose record is gone (TTL, drop) are skipped and removed (trap 35).
-- Go pages by insertion counter so one call never holds the server for
-- every device.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  index
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  exclusive   lower bound ("-inf" for the first page, else "(<counter>")
-- ARGV[5]  limit       most index entries examined
-- ARGV[6]  budget      byte budget: the page ends after the record that reaches it (a
--                       record holds up to its runner's advertised lists, bounded by
--                       the store, so a page is about this budget plus one record)
-- Reply: {cursor: counter of the last entry examined, "" when the index is
--         exhausted; flat hashes..., each ending with '_seq', its first-seen
--         number (Go merges the shards' listings by it)}

local index = KEYS[1]
local exclusive = ARGV[4]
local limit = tonumber(ARGV[5])
local budget = tonumber(ARGV[6])

local bytes = 0
local page = redis.call('ZRANGEBYSCORE', index, exclusive, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local out = {''}
for i = 1, #page, 2 do
  out[1] = page[i + 1]
  local rec = redis.call('HGETALL', P .. 'p:' .. page[i])
  if #rec == 0 then
    redis.call('ZREM', index, page[i])
  else
    rec[#rec + 1] = '_seq'
    rec[#rec + 1] = page[i + 1]
    out[#out + 1] = rec
    for j = 2, #rec, 2 do
      bytes = bytes + #rec[j]
    end
    if bytes >= budget then
      return out -- the cursor is this record's counter: more may follow
    end
  end
end
if #page < 2 * limit then
  out[1] = ''
end
return out
