-- finished: one page of a site's done jobs that carry a result, in insertion
-- order (§2.6). Pure read: never settles. Go pages by seq, so one call holds
-- the server for a bounded number of entries and bytes, never for all of them.
-- lib: blob
-- lib: store
-- lib: pages
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  finished    fin:<eS>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_site
-- ARGV[5]  exclusive   lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[6]  most        index entries examined
-- ARGV[7]  budget      budget: the page ends after the entry that reaches it
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; snapshots...}

local finished = KEYS[1]
local e_site = ARGV[4]
local exclusive = ARGV[5]
local most = ARGV[6]
local budget = ARGV[7]

return page_of(finished, e_site, exclusive, tonumber(most), tonumber(budget), function(m)
  -- a result whole, or the length of its slices
  local v = redis.call('HMGET', jkey(m), 'state', 'rs', slice_name('rs', 0))
  return v[1] == DONE and (v[2] or v[3])
end)
