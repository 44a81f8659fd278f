-- give_back: hand back the grants of a claim whose answer never reached its
-- runner (the relay gave up waiting: store timeout, a client that hung up).
-- The relay knows the claim's token and every lease id it minted for it,
-- not which were granted. First the token is revoked on this shard (a claim
-- script of that token that runs later, still queued behind this one on
-- another connection, grants nothing: lua/claim.lua), then each named grant
-- that is still exactly that grant is requeued as a plain release would
-- (§2.10, no reason, no retry-after). A lease id that resolves to nothing,
-- or to a grant another claim made since (a different lease id), is left
-- alone, so calling it again changes nothing: it is idempotent.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  lease        the lease index (of the shard the lease ids name; job
--                       records are built from KEYS[1]'s prefix)
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  runner       the runner id
-- ARGV[5]  token        the claim token
-- ARGV[6]  ttl          the revocation's lifetime (ms)
-- ARGV[7]  n            how many lease ids (at most store.GrantChunk, 32)
-- ARGV[8..] minted      the n lease ids as minted; then ns, and the ns
--                       encoded sites of the claim's routes on this shard:
--                       a grant's id is a minted one, or one with a site
--                       appended (lib/store.lua)
-- Reply: {given back: the lease ids requeued, as granted, reports}

local lease = KEYS[1]
local runner = ARGV[4]
local token = ARGV[5]
local ttl = ARGV[6]
local n = tonumber(ARGV[7])
local minted = tail(ARGV, 8)
local ns = tonumber(minted[n + 1])

local now = clock()
redis.call('SET', P .. 'gb:' .. token, '1', 'PX', ttl)
local given = {}
for i = 1, n do
  -- The forms this minted id can have been granted as, looked up at once.
  local forms = {minted[i]}
  for j = 1, ns do
    forms[j + 1] = minted[i] .. '.' .. minted[n + 1 + j]
  end
  local found = redis.call('HMGET', lease, unpack(forms))
  local lease_id, m
  for j = 1, #forms do
    if found[j] then
      lease_id, m = forms[j], found[j]
      break
    end
  end
  if m then
    local h = core(m)
    if not h or h.cl ~= lease_id then
      redis.call('HDEL', lease, lease_id) -- index entry outlived its grant
    elseif h.cr == runner and (h.state == AWAITING or h.state == READY)
        and not settle(m, now, false, h) then
      -- Awaiting or ready only: a runner that fetched or finished the job
      -- knew its lease, so that claim was answered after all.
      requeue(m, h)
      given[#given + 1] = lease_id
    end
  end
end
return {given, REPORTS}
