-- counts: jobs in each state and active grants, for metrics. Pure read,
-- O(1): one SCARD per state set (kept by move_state in lib/store.lua).
-- lib: store
--
-- KEYS     none (the state sets are built from the prefix, same slot)
-- ARGV[1..3] prefix, offset (unused), churn (unused)
-- Reply: {queued, awaiting-payload, ready, running, done}

return {
  redis.call('SCARD', P .. 'st:' .. QUEUED),
  redis.call('SCARD', P .. 'st:' .. AWAITING),
  redis.call('SCARD', P .. 'st:' .. READY),
  redis.call('SCARD', P .. 'st:' .. RUNNING),
  redis.call('SCARD', P .. 'st:' .. DONE),
}
