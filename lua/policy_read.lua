-- policy_read: the grant engine's one read per decision (PolicyStore.read of
-- @byollm/control-plane): a consent with its mappings, whether it is paused,
-- whether the user is on the owner's team, the site's declared purposes, and
-- the store clock the grant's issuedAt comes from. Writes nothing.
--
-- mode: write (reads TIME, which a read-only script may not everywhere; writes nothing)
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  pol:c (HASH ⟨S⟩:⟨U⟩ -> mappings JSON)   KEYS[2]  pol:p (SET ⟨S⟩:⟨U⟩ paused)
-- KEYS[3]  pol:t:⟨O⟩ (SET ⟨U⟩ members)              KEYS[4]  pol:d (HASH ⟨S⟩ -> purposes JSON)
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  ⟨S⟩:⟨U⟩   ARGV[5]  ⟨U⟩   ARGV[6]  ⟨S⟩
-- Reply: {mappings JSON or false (no consent), paused 0|1, member 0|1,
--         purposes JSON or false (declares everything), now ms}

local now = fmt(clock())
return {
  redis.call('HGET', KEYS[1], ARGV[4]),
  redis.call('SISMEMBER', KEYS[2], ARGV[4]),
  redis.call('SISMEMBER', KEYS[3], ARGV[5]),
  redis.call('HGET', KEYS[4], ARGV[6]),
  now,
}
