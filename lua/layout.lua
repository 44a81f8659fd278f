-- layout: read the namespace's layout record, or write it for a new
-- namespace (internal/layout layout.go).
--
-- Every key is fleet-wide ("<ns>:{<ns>}:"): one slot.
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  layout      HASH version, shards, salt (hex)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  version     to write
-- ARGV[5]  shards      to write
-- ARGV[6]  salt        (hex)
-- Reply: {version, shards, salt}: the record (just written if there was none)

local layout = KEYS[1]
local version = ARGV[4]
local shards = ARGV[5]
local salt = ARGV[6]

local r = redis.call('HMGET', layout, 'version', 'shards', 'salt')
if r[1] then
  return r
end
redis.call('HSET', layout, 'version', version, 'shards', shards, 'salt', salt)
return {version, shards, salt}
