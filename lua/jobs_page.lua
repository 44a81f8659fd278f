-- jobs_page: one page of every job in insertion order (§2.4). Pure read.
-- Go pages by seq so one call never holds the server for all N jobs.
-- lib: blob
-- lib: store
-- lib: pages
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  all
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  exclusive lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[5]  most index entries examined
-- ARGV[6]  byte budget: the page ends after the entry that reaches it
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; snapshots...}

return page_of(KEYS[1], nil, ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), function()
  return true
end)
