-- ops_token_get: the record of a scoped view token by its digest. Pure read.
-- Read-only: runs with EVALSHA_RO (internal/store/opsview.go lists it).
--
-- KEYS[1]  ops:tk  HASH  token digest (hex) -> record JSON
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  digest
-- Reply: the record JSON, or nil

return redis.call('HGET', KEYS[1], ARGV[4])
