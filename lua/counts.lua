-- counts: jobs in each state, for metrics. Pure read, O(1): one SCARD per
-- state set (kept by move_state in lib/store.lua). The keys are named so a
-- cluster routes the call to the namespace's slot.
-- lib: store
--
-- KEYS[1]  st:queued   KEYS[2]  st:awaiting-payload   KEYS[3]  st:ready
-- KEYS[4]  st:running  KEYS[5]  st:done
-- ARGV[1..3] prefix, offset (unused), churn (unused)
-- Reply: {queued, awaiting-payload, ready, running, done}

return {
  redis.call('SCARD', KEYS[1]),
  redis.call('SCARD', KEYS[2]),
  redis.call('SCARD', KEYS[3]),
  redis.call('SCARD', KEYS[4]),
  redis.call('SCARD', KEYS[5]),
}
