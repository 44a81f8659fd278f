-- finished: one page of a site's done jobs that carry a result, in insertion
-- order (§2.6). Pure read: never settles. Go pages by seq, so one call holds
-- the server for a bounded number of entries and bytes, never for all of them.
-- lib: blob
-- lib: store
-- lib: pages
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  fin:<eS>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eS
-- ARGV[5]  exclusive lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[6]  most index entries examined
-- ARGV[7]  byte budget: the page ends after the entry that reaches it
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; snapshots...}

return page_of(KEYS[1], ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), function(m)
  -- a result whole, or the length of its slices (v4's numbered form, v3's)
  local v = redis.call('HMGET', jkey(m), 'state', 'rs', slice_name('rs', 0, true), slice_name('rs', 0, false))
  return v[1] == DONE and (v[2] or v[3] or v[4])
end)
