-- policy_read: the grant engine's one read per decision (PolicyStore.read of
-- @byollm/control-plane): a consent with its mappings, whether it is paused,
-- whether the user is on the owner's team, the site's declared purposes, and
-- the store clock the grant's issuedAt comes from. Writes nothing.
--
-- mode: write (reads TIME, which a read-only script may not everywhere; writes nothing)
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  consents    pol:c (HASH ⟨S⟩:⟨U⟩ -> mappings JSON)
-- KEYS[2]  paused      pol:p (SET ⟨S⟩:⟨U⟩ paused)
-- KEYS[3]  team        pol:t:⟨O⟩ (SET ⟨U⟩ members)
-- KEYS[4]  declared    pol:d (HASH ⟨S⟩ -> purposes JSON)
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  consent     ⟨S⟩:⟨U⟩
-- ARGV[5]  user        ⟨U⟩
-- ARGV[6]  site        ⟨S⟩
-- Reply: {mappings JSON or false (no consent), paused 0|1, member 0|1,
--         purposes JSON or false (declares everything), now ms}

local consents = KEYS[1]
local paused = KEYS[2]
local team = KEYS[3]
local declared = KEYS[4]
local consent = ARGV[4]
local user = ARGV[5]
local site = ARGV[6]

local now = fmt(clock())
return {
  redis.call('HGET', consents, consent),
  redis.call('SISMEMBER', paused, consent),
  redis.call('SISMEMBER', team, user),
  redis.call('HGET', declared, site),
  now,
}
