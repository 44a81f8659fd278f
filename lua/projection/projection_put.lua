-- projection_put: install a new projection document, bumping its version.
--
-- The projection is one versioned document shared by every replica. Go has
-- already validated and canonicalised the JSON; this script only decides, in
-- one atomic step, whether the write goes ahead, and announces it.
--
-- mode: write
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  key          <ns>:{<ns>}:projection, HASH version, json, sha, updatedAt
-- KEYS[2]  sites        <ns>:{<ns>}:projection:sites, HASH site id -> generation:
--                       the version at which the site (last) entered the
--                       projection; the operations view binds its site
--                       tokens to it (ops_token_put.lua)
-- ARGV[1]  expected     expected version (decimal); "" = write whatever is
--                       stored, "0" = only if no document exists yet
-- ARGV[2]  doc          the document (canonical JSON, stored raw)
-- ARGV[3]  sha          hex SHA-256 of doc
-- ARGV[4]  channel      PUB/SUB channel told the new version
-- ARGV[5..] site_ids    the document's site ids
-- Reply: {status, version, updatedAt}
--   "ok"       written; version is the new version, updatedAt Valkey TIME ms
--   "same"     the stored document is byte-identical; nothing written or
--              published (so replicas all pushing one file bump nothing)
--   "conflict" the stored version is not expected; nothing written; version
--              is the one found

-- tail(t, i): t[i], t[i + 1], ... (lib/common.lua's, which this
-- self-contained script does not take).
local function tail(t, i)
  local out = {}
  for j = i, #t do
    out[#out + 1] = t[j]
  end
  return out
end

local key = KEYS[1]
local sites = KEYS[2]
local expected = ARGV[1]
local doc = ARGV[2]
local sha = ARGV[3]
local channel = ARGV[4]
local site_ids = tail(ARGV, 5)

local cur = redis.call('HMGET', key, 'version', 'sha', 'updatedAt')
local version = tonumber(cur[1]) or 0
local updated = tonumber(cur[3]) or 0

if expected ~= '' and tonumber(expected) ~= version then
  return {'conflict', version, updated}
end
if version > 0 and cur[2] == sha then
  return {'same', version, updated}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
version = version + 1
redis.call('HSET', key, 'version', version, 'json', doc, 'sha', sha, 'updatedAt', now)
-- Sites new to the projection start a generation; sites gone lose theirs,
-- so coming back later starts a new one.
local present = {}
for _, id in ipairs(site_ids) do
  present[id] = true
  redis.call('HSETNX', sites, id, version)
end
for _, id in ipairs(redis.call('HKEYS', sites)) do
  if not present[id] then
    redis.call('HDEL', sites, id)
  end
end
redis.call('PUBLISH', channel, version)
return {'ok', version, now}
