-- presence_by_owner: the capability matrices of every presence record of one
-- owner (what the owner's devices advertise now; the grant engine's
-- satisfiable reads it). Index entries whose record is gone (expired,
-- dropped) or belongs to another owner are removed.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  po:⟨O⟩ (SET ⟨R⟩ of the owner's presence records)
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  owner (raw)
-- Reply: array of capability matrices (raw JSON), one per live record

local out = {}
for _, er in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local rec = redis.call('HMGET', P .. 'p:' .. er, 'owner', 'capabilities')
  if rec[1] == ARGV[4] and rec[2] then
    out[#out + 1] = rec[2]
  else
    redis.call('SREM', KEYS[1], er)
  end
end
return out
