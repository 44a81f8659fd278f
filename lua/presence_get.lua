-- presence_get: one runner's record (§2.16). Pure read; lastSeenAt unchanged.
--
-- KEYS[1]  p:<eR>
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: flat hash, empty when there is no record

return redis.call('HGETALL', KEYS[1])
