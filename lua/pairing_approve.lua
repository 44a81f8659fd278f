-- pairing_approve: approve a live pending pairing by its user code and make
-- the device part of the projection, in one step. The code must still be
-- live (judged on this script's one TIME reading), stored under that user
-- code for the device code the caller looked up, and not approved yet; the
-- projection must still be at the version the caller checked the record
-- against (identity and runner id conflicts are judged in Go on that
-- version, and every approval bumps it). The record goes into the
-- projection's approved-devices hash, which every replica adds to the
-- stored document (internal/projectionsync), so a later wholesale PUT of
-- the document does not drop it.
-- lib: pairing
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  pc:u   KEYS[2]  pc:d   KEYS[3]  pc:x   KEYS[4]  pc:ok
-- KEYS[5]  projection        HASH version, json, sha, updatedAt
-- KEYS[6]  projection:approved   HASH runnerId -> DeviceRecord (raw JSON)
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  userCode (normalised)   ARGV[5]  deviceCode the caller looked up
-- ARGV[6]  projection version the caller checked against
-- ARGV[7]  runnerId   ARGV[8]  device record (raw JSON)
-- ARGV[9]  PUB/SUB channel told the new version
-- Reply: {'ok', version, updatedAt} | {'unknown'} | {'expired'} (expired but
--   not purged yet) | {'approved', runnerId} (already) | {'conflict', version}
--   (the projection changed, or another code took the user code, since the
--   caller looked; nothing written, look again)

local uc, dc, expected, runner = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local now = clock()

local holder = redis.call('HGET', KEYS[1], uc)
if not holder then
  return {'unknown'}
end
if holder ~= dc then
  return {'conflict', '0'} -- the looked-up code was replaced; look again
end
if not live_code(dc, now) then
  return {'expired'}
end
local already = redis.call('HGET', KEYS[4], dc)
if already then
  return {'approved', already}
end
local version = tonumber(redis.call('HGET', KEYS[5], 'version')) or 0
if version ~= expected then
  return {'conflict', fmt(version)}
end

version = version + 1
redis.call('HSET', KEYS[6], runner, ARGV[8])
redis.call('HSET', KEYS[4], dc, runner)
redis.call('HSET', KEYS[5], 'version', version, 'updatedAt', fmt(now))
redis.call('PUBLISH', ARGV[9], version)
return {'ok', fmt(version), fmt(now)}
