-- projection_get: read the stored document and the approved devices together.
--
-- Devices approved through the admin API (pairing_approve.lua) are kept in a
-- hash of their own beside the document, so a wholesale PUT of the document
-- cannot drop them; the projection in force is the document plus those of
-- them whose runnerId the document does not name. Reading both in one script
-- means a reader never pairs a document with the approved set of another
-- version.
--
-- mode: read-only
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  document     <ns>:{<ns>}:projection, HASH version, json, sha, updatedAt
-- KEYS[2]  approved     <ns>:{<ns>}:projection:approved, HASH runnerId -> DeviceRecord JSON
-- ARGV: none
-- Reply: {version, json or "", sha or "", updatedAt, runnerId1, record1, ...}
--   version and updatedAt as decimal strings ("0" when absent)

local document = KEYS[1]
local approved = KEYS[2]

local cur = redis.call('HMGET', document, 'version', 'json', 'sha', 'updatedAt')
local out = {cur[1] or '0', cur[2] or '', cur[3] or '', cur[4] or '0'}
for _, v in ipairs(redis.call('HGETALL', approved)) do
  out[#out + 1] = v
end
return out
