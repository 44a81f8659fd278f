-- awaiting: one page of a site's awaiting-payload jobs in insertion order
-- (§2.5). Pure read: never settles; entries whose record disagrees are
-- skipped. Go pages by seq.
-- lib: blob
-- lib: store
-- lib: pages
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  awaiting    aw:<eS>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_site
-- ARGV[5]  exclusive   lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[6]  most        index entries examined
-- ARGV[7]  budget      budget: the page ends after the entry that reaches it
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; snapshots...}

local awaiting = KEYS[1]
local e_site = ARGV[4]
local exclusive = ARGV[5]
local most = ARGV[6]
local budget = ARGV[7]

return page_of(awaiting, e_site, exclusive, tonumber(most), tonumber(budget), function(m)
  return redis.call('HGET', jkey(m), 'state') == AWAITING
end)
