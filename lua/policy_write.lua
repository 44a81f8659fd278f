-- policy_write: apply one policy change atomically: a whole document (PUT),
-- a merge, or one act of the store contract's write surface (consent,
-- revoke, pause, resume, add or remove a member). Go validated everything;
-- every id arrives base64url-encoded (⟨x⟩), so fields joined with ':' never
-- collide whatever the ids hold.
--
-- mode: write
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  pol:c (HASH ⟨S⟩:⟨U⟩ -> mappings JSON)   KEYS[2]  pol:p (SET ⟨S⟩:⟨U⟩)
-- KEYS[3]  pol:towners (SET ⟨O⟩)   KEYS[4]  pol:d (HASH ⟨S⟩ -> purposes JSON)
-- KEYS[5]  pol:v (STR version)     team sets pol:t:⟨O⟩ are named from the prefix
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  "replace" (drop the whole policy first) or "merge"
-- then five sections, each a count followed by its items:
--   consents  n, then n × (⟨S⟩:⟨U⟩, mappings JSON, paused "0"|"1")
--             (writing a consent sets or clears its pause)
--   revokes   n, then n × ⟨S⟩:⟨U⟩          (the consent and its pause go)
--   pauses    n, then n × (⟨S⟩:⟨U⟩, "1" pause | "0" resume)
--   teams     n, then n × (⟨O⟩, m, m × ⟨U⟩)  (the owner's members replaced)
--   members   n, then n × (⟨O⟩, ⟨U⟩, "1" add | "0" remove)
--   declares  n, then n × (⟨S⟩, purposes JSON)
-- Reply: the new version (integer)

local function team(eo) return P .. 'pol:t:' .. eo end

if ARGV[4] == 'replace' then
  for _, eo in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    redis.call('DEL', team(eo))
  end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
end

local i = 5
local function take()
  local v = ARGV[i]
  i = i + 1
  return v
end

local n = tonumber(take())
for _ = 1, n do
  local f, m, paused = take(), take(), take()
  redis.call('HSET', KEYS[1], f, m)
  if paused == '1' then
    redis.call('SADD', KEYS[2], f)
  else
    redis.call('SREM', KEYS[2], f)
  end
end

n = tonumber(take())
for _ = 1, n do
  local f = take()
  redis.call('HDEL', KEYS[1], f)
  redis.call('SREM', KEYS[2], f)
end

n = tonumber(take())
for _ = 1, n do
  local f, on = take(), take()
  if on == '1' then
    redis.call('SADD', KEYS[2], f)
  else
    redis.call('SREM', KEYS[2], f)
  end
end

n = tonumber(take())
for _ = 1, n do
  local eo = take()
  local m = tonumber(take())
  redis.call('DEL', team(eo))
  for _ = 1, m do
    redis.call('SADD', team(eo), take())
  end
  if m > 0 then
    redis.call('SADD', KEYS[3], eo)
  else
    redis.call('SREM', KEYS[3], eo)
  end
end

n = tonumber(take())
for _ = 1, n do
  local eo, eu, on = take(), take(), take()
  if on == '1' then
    redis.call('SADD', team(eo), eu)
    redis.call('SADD', KEYS[3], eo)
  else
    redis.call('SREM', team(eo), eu)
    if redis.call('SCARD', team(eo)) == 0 then
      redis.call('SREM', KEYS[3], eo)
    end
  end
end

n = tonumber(take())
for _ = 1, n do
  local es, purposes = take(), take()
  redis.call('HSET', KEYS[4], es, purposes)
end

return redis.call('INCR', KEYS[5])
