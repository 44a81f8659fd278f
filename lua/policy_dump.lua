-- policy_dump: the whole policy, for GET /policy and the projection check.
-- Pure read.
--
-- mode: read-only
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  pol:c   KEYS[2]  pol:p   KEYS[3]  pol:towners (SET ⟨O⟩ with a team)
-- KEYS[4]  pol:d   KEYS[5]  pol:v (version)
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: {version or false, flat pol:c, pol:p members, flat pol:d,
--         {⟨O⟩, {⟨U⟩...}, ⟨O⟩, {...}, ...}}

local teams = {}
for _, eo in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  teams[#teams + 1] = eo
  teams[#teams + 1] = redis.call('SMEMBERS', P .. 'pol:t:' .. eo)
end
return {
  redis.call('GET', KEYS[5]),
  redis.call('HGETALL', KEYS[1]),
  redis.call('SMEMBERS', KEYS[2]),
  redis.call('HGETALL', KEYS[4]),
  teams,
}
