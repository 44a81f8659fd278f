-- results_get: the results of done jobs named by results_page, as the site
-- plane's results answer shows them (§2.6). A job no longer there, or
-- there under another seq (removed and enqueued again), is left out. Pure
-- read. The reply ends early once it holds the byte budget (always after at
-- least one job), so a call stays short however large the envelopes. Only
-- lib/blob.lua: see pending_page. A cluster's results polls run it; on one
-- node Go reads the same with plain commands (internal/store
-- resultsGetPlain; TestResultsGetMatchesTheScript holds the two together).
-- lib: blob
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  finished     fin:<eS>
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  e_site       eS
-- ARGV[5]  budget       byte budget
-- ARGV[6..] asked       pairs: eJ, seq
-- Reply: {pairs consumed, then 8 strings per job still there: position of
--         its pair (1-based), eJ (as asked; Go decodes it), result (raw
--         JSON), disposition, runnerId,
--         leaseId, device (raw JSON), runnerOwner; "" when absent (no
--         leaseId: no grant)}

local e_site = ARGV[4]
local budget = tonumber(ARGV[5])
local asked = tail(ARGV, 6)

local out = {0}
local bytes = 0
local n = #asked / 2
for i = 1, n do
  out[1] = i
  local k = P .. 'j:' .. e_site .. ':' .. asked[2 * i - 1]
  local v = redis.call('HMGET', k, 'state', 'seq', 'rs', 'dp', 'cr', 'cl', 'cd', 'co')
  if v[1] == 'done' and v[2] == asked[2 * i] then
    v[3], v[7] = v[3] or get_blob(k, 'rs', 32), v[7] or get_blob(k, 'cd', 4)
  end
  if v[1] == 'done' and v[2] == asked[2 * i] and v[3] then
    out[#out + 1] = i
    out[#out + 1] = asked[2 * i - 1]
    out[#out + 1] = v[3]
    for f = 4, 8 do
      out[#out + 1] = v[f] or ''
    end
    bytes = bytes + #v[3]
    if bytes >= budget then
      return out
    end
  end
end
return out
