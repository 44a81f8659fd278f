-- pending_page: one page of a site's awaiting-payload jobs (§2.5) holding
-- only what the site plane's pending answer shows, in insertion order. Pure
-- read: never settles; entries whose record disagrees are skipped. It
-- carries only lib/blob.lua (the device may be stored in slices):
-- building lib/store.lua costs a script some 40 µs per call. A cluster's
-- pending polls run it; on one node Go reads the same page with plain
-- commands (internal/store pendingPagePlain, which knows blob.lua's
-- layout; TestPendingPageMatchesTheScript holds the two together).
-- lib: blob
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  awaiting_index      aw:<eS>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_site
-- ARGV[5]  exclusive   lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[6]  limit       most index entries examined
-- Reply: {cursor: seq of the last entry examined, "" when the index is
--         exhausted; then 6 strings per job: eJ (the job id encoded as in
--         the member; Go decodes it), device (raw JSON), runnerId, leaseId,
--         awaitingUntil, leaseExpiresAt, each "" when absent}

local awaiting_index = KEYS[1]
local e_site = ARGV[4]
local exclusive = ARGV[5]
local limit = tonumber(ARGV[6])

local page = redis.call('ZRANGEBYSCORE', awaiting_index, exclusive, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local out = {''}
for i = 1, #page, 2 do
  out[1] = page[i + 1]
  local k = P .. 'j:' .. e_site .. ':' .. page[i]
  local v = redis.call('HMGET', k, 'state', 'cd', 'cr', 'cl', 'au', 'ce')
  if v[1] == 'awaiting-payload' then
    v[2] = v[2] or get_blob(k, 'cd', 4)
    out[#out + 1] = page[i]
    for f = 2, 6 do
      out[#out + 1] = v[f] or ''
    end
  end
end
if #page < 2 * limit then
  out[1] = ''
end
return out
