-- projection_unapprove: forget one device approved through the admin API.
--
-- The device leaves the projection every replica serves (unless the document
-- names its runner id itself), so it is unpaired: "not recognised" on its next
-- request. The version is bumped only when a record was removed.
--
-- mode: write
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  document     <ns>:{<ns>}:projection, HASH version, json, sha, updatedAt
-- KEYS[2]  approved     <ns>:{<ns>}:projection:approved, HASH runnerId -> DeviceRecord JSON
-- ARGV[1]  runner       the runner id
-- ARGV[2]  channel      PUB/SUB channel told the new version
-- Reply: {removed (1 or 0), version (decimal string)}

local document = KEYS[1]
local approved = KEYS[2]
local runner = ARGV[1]
local channel = ARGV[2]

local version = tonumber(redis.call('HGET', document, 'version')) or 0
if redis.call('HDEL', approved, runner) == 0 then
  return {0, string.format('%.0f', version)}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
version = version + 1
redis.call('HSET', document, 'version', version, 'updatedAt', now)
redis.call('PUBLISH', channel, version)
return {1, string.format('%.0f', version)}
