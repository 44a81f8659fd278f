-- job: read one job by its full key (§2.3). Pure read: never settles.
-- lib: store
--
-- KEYS[1]  j:<eS>:<eJ>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  member <eS>:<eJ>
-- Reply: snapshot {flat hash, refusedBy, flat retryAfter}, or nil when absent

return snapshot(ARGV[4], false)
