-- presence_by_owner: the capability matrices of every presence record of one
-- owner (what the owner's devices advertise now; the grant engine's
-- satisfiable reads it). Index entries whose record is gone (expired,
-- dropped) or belongs to another owner are removed.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  by_owner    po:⟨O⟩ (SET ⟨R⟩ of the owner's presence records)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  e_owner     (raw)
-- Reply: array of capability matrices (raw JSON), one per live record

local by_owner = KEYS[1]
local e_owner = ARGV[4]

local out = {}
for _, er in ipairs(redis.call('SMEMBERS', by_owner)) do
  local rec = redis.call('HMGET', P .. 'p:' .. er, 'owner', 'capabilities')
  if rec[1] == e_owner and rec[2] then
    out[#out + 1] = rec[2]
  else
    redis.call('SREM', by_owner, er)
  end
end
return out
