-- cancel_requests: one page of the cancelled jobs a runner currently holds,
-- done jobs included, in insertion order (§2.13). Pure read. Go pages by
-- the index score (the job's seq), so one call never walks more than a page
-- of a runner's index however much it holds.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  cancelled   cxl:<eR> on one shard of the runner's record (job records: its prefix)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  runner
-- ARGV[5]  exclusive   lower bound ("-inf" for the first page, else "(<seq>")
-- ARGV[6]  limit       most index entries examined
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; then one flat {eJ, leaseId, seq} per grant listed (the
--         job id encoded as in the member: records keep no raw id, and Go
--         decodes it)}

local cancelled = KEYS[1]
local runner = ARGV[4]
local exclusive = ARGV[5]
local limit = tonumber(ARGV[6])

local page = redis.call('ZRANGEBYSCORE', cancelled, exclusive, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local out = {''}
for i = 1, #page, 2 do
  out[1] = page[i + 1]
  local v = redis.call('HMGET', P .. 'j:' .. page[i], 'cx', 'cr', 'cl')
  if v[1] == '1' and v[2] == runner and v[3] then
    out[#out + 1] = {string.match(page[i], ':(.*)$'), v[3], page[i + 1]}
  end
end
if #page < 2 * limit then
  out[1] = ''
end
return out
