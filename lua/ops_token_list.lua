-- ops_token_list: every scoped view token's record (never a token or its
-- digest), for the admin. Pure read, bounded by the cap ops_token_put keeps.
-- Read-only: runs with EVALSHA_RO (internal/store/opsview.go lists it).
--
-- KEYS[1]  ops:tk  HASH  token digest (hex) -> record JSON
-- ARGV[1..3] prefix, offset, churn (unused)
-- Reply: {record JSON, ...}

return redis.call('HVALS', KEYS[1])
