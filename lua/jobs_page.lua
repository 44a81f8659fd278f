-- jobs_page: one page of every job in insertion order (§2.4). Pure read.
-- Go pages by seq so one call never holds the server for all N jobs.
-- lib: store
--
-- KEYS[1]  all
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  exclusive lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[5]  page size
-- Reply: {last seq of the page or "" when empty, snapshots...}

local page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[5]))
local out = {''}
for i = 1, #page, 2 do
  out[1] = page[i + 1]
  local s = snapshot(page[i], false)
  if s then
    out[#out + 1] = s
  end
end
return out
