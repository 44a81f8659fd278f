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
-- KEYS[1]  by_user      pc:u, user code -> device code (lib/pairing.lua
--                       reads pc:d and pc:x from P)
-- KEYS[2]  approved     pc:ok, device code -> the runner id it was approved as
-- KEYS[3]  projection   HASH version, json, sha, updatedAt
-- KEYS[4]  devices      projection:approved, HASH runnerId -> DeviceRecord (raw JSON)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  uc           the user code (normalised)
-- ARGV[5]  dc           the device code the caller looked up
-- ARGV[6]  expected     the projection version the caller checked against
-- ARGV[7]  runner       the runner id
-- ARGV[8]  record       the device record (raw JSON)
-- ARGV[9]  channel      PUB/SUB channel told the new version
-- Reply: {'ok', version, updatedAt} | {'unknown'} | {'expired'} (expired but
--   not purged yet) | {'approved', runnerId} (already) | {'conflict', version}
--   (the projection changed, or another code took the user code, since the
--   caller looked; nothing written, look again)

local by_user = KEYS[1]
local approved = KEYS[2]
local projection = KEYS[3]
local devices = KEYS[4]
local uc = ARGV[4]
local dc = ARGV[5]
local expected = tonumber(ARGV[6])
local runner = ARGV[7]
local record = ARGV[8]
local channel = ARGV[9]

local now = clock()

local holder = redis.call('HGET', by_user, uc)
if not holder then
  return {'unknown'}
end
if holder ~= dc then
  return {'conflict', '0'} -- the looked-up code was replaced; look again
end
if not live_code(dc, now) then
  return {'expired'}
end
local already = redis.call('HGET', approved, dc)
if already then
  return {'approved', already}
end
local version = tonumber(redis.call('HGET', projection, 'version')) or 0
if version ~= expected then
  return {'conflict', fmt(version)}
end

version = version + 1
redis.call('HSET', devices, runner, record)
redis.call('HSET', approved, dc, runner)
redis.call('HSET', projection, 'version', version, 'updatedAt', fmt(now))
redis.call('PUBLISH', channel, version)
return {'ok', fmt(version), fmt(now)}
