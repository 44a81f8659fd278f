-- policy_dump: the whole policy, for GET /policy and the projection check.
-- Pure read.
--
-- mode: read-only
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  consents    pol:c
-- KEYS[2]  paused      pol:p
-- KEYS[3]  team_owners pol:towners (SET ⟨O⟩ with a team)
-- KEYS[4]  declared    pol:d
-- KEYS[5]  version     pol:v (version)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- Reply: {version or false, flat pol:c, pol:p members, flat pol:d,
--         {⟨O⟩, {⟨U⟩...}, ⟨O⟩, {...}, ...}}

local consents = KEYS[1]
local paused = KEYS[2]
local team_owners = KEYS[3]
local declared = KEYS[4]
local version = KEYS[5]

local teams = {}
for _, eo in ipairs(redis.call('SMEMBERS', team_owners)) do
  teams[#teams + 1] = eo
  teams[#teams + 1] = redis.call('SMEMBERS', P .. 'pol:t:' .. eo)
end
return {
  redis.call('GET', version),
  redis.call('HGETALL', consents),
  redis.call('SMEMBERS', paused),
  redis.call('HGETALL', declared),
  teams,
}
