--[[
projection_get: read the stored document and the approved devices together.

Devices approved through the admin API (pairing_approve.lua) are kept in a
hash of their own beside the document, so a wholesale PUT of the document
cannot drop them; the projection in force is the document plus those of
them whose runnerId the document does not name. Reading both in one script
means a reader never pairs a document with the approved set of another
version.
]]
-- mode: read-only
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- ==== KEYS ====
-- KEYS[1] -> <ns>:{<ns>}:projection            HASH version, json, sha, updatedAt
-- KEYS[2] -> <ns>:{<ns>}:projection:approved   HASH runnerId -> DeviceRecord JSON
-- ==== ARGV ====
-- none
-- ==== Returns ====
-- {version, json or "", sha or "", updatedAt, runnerId1, record1, ...}
--   version and updatedAt as decimal strings ("0" when absent)
local cur = redis.call('HMGET', KEYS[1], 'version', 'json', 'sha', 'updatedAt')
local out = {cur[1] or '0', cur[2] or '', cur[3] or '', cur[4] or '0'}
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do
  out[#out + 1] = v
end
return out
