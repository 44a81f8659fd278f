--[[
projection_unapprove: forget one device approved through the admin API.

The device leaves the projection every replica serves (unless the document
names its runner id itself), so it is unpaired: "not recognised" on its next
request. The version is bumped only when a record was removed.
]]
-- mode: write
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- ==== KEYS ====
-- KEYS[1] -> <ns>:{<ns>}:projection            HASH version, json, sha, updatedAt
-- KEYS[2] -> <ns>:{<ns>}:projection:approved   HASH runnerId -> DeviceRecord JSON
-- ==== ARGV ====
-- ARGV[1] -> runnerId
-- ARGV[2] -> PUB/SUB channel told the new version
-- ==== Returns ====
-- {removed (1 or 0), version (decimal string)}
local version = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return {0, string.format('%.0f', version)}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
version = version + 1
redis.call('HSET', KEYS[1], 'version', version, 'updatedAt', now)
redis.call('PUBLISH', ARGV[2], version)
return {1, string.format('%.0f', version)}
