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
-- Reply: {version, changed}: a replace always writes and bumps the version;
-- a merge or act that changes nothing (an empty merge, a consent written
-- again as it is, a pause of a paused consent) writes nothing and keeps
-- it, changed 0, as the projection's empty merge does.

local function team(eo) return P .. 'pol:t:' .. eo end

local changed = ARGV[4] == 'replace'
if changed then
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
-- mark notes a command's reply: SADD, SREM, HDEL answer how many members
-- they changed.
local function mark(n)
  if n > 0 then changed = true end
end

local n = tonumber(take())
for _ = 1, n do
  local f, m, paused = take(), take(), take()
  if redis.call('HGET', KEYS[1], f) ~= m then
    redis.call('HSET', KEYS[1], f, m)
    changed = true
  end
  if paused == '1' then
    mark(redis.call('SADD', KEYS[2], f))
  else
    mark(redis.call('SREM', KEYS[2], f))
  end
end

n = tonumber(take())
for _ = 1, n do
  local f = take()
  mark(redis.call('HDEL', KEYS[1], f))
  mark(redis.call('SREM', KEYS[2], f))
end

n = tonumber(take())
for _ = 1, n do
  local f, on = take(), take()
  if on == '1' then
    mark(redis.call('SADD', KEYS[2], f))
  else
    mark(redis.call('SREM', KEYS[2], f))
  end
end

n = tonumber(take())
for _ = 1, n do
  local eo = take()
  local m = tonumber(take())
  local want, list = {}, {}
  for _ = 1, m do
    local u = take()
    if not want[u] then
      want[u] = true
      list[#list + 1] = u
    end
  end
  local size = #list
  -- The member list is replaced; it changes unless the set is the same.
  local same = redis.call('SCARD', team(eo)) == size
  if same then
    for _, u in ipairs(redis.call('SMEMBERS', team(eo))) do
      if not want[u] then
        same = false
        break
      end
    end
  end
  if not same then
    changed = true
    redis.call('DEL', team(eo))
    for _, u in ipairs(list) do
      redis.call('SADD', team(eo), u)
    end
  end
  if size > 0 then
    mark(redis.call('SADD', KEYS[3], eo))
  else
    mark(redis.call('SREM', KEYS[3], eo))
  end
end

n = tonumber(take())
for _ = 1, n do
  local eo, eu, on = take(), take(), take()
  if on == '1' then
    mark(redis.call('SADD', team(eo), eu))
    mark(redis.call('SADD', KEYS[3], eo))
  else
    mark(redis.call('SREM', team(eo), eu))
    if redis.call('SCARD', team(eo)) == 0 then
      mark(redis.call('SREM', KEYS[3], eo))
    end
  end
end

n = tonumber(take())
for _ = 1, n do
  local es, purposes = take(), take()
  if redis.call('HGET', KEYS[4], es) ~= purposes then
    redis.call('HSET', KEYS[4], es, purposes)
    changed = true
  end
end

if not changed then
  return {tonumber(redis.call('GET', KEYS[5])) or 0, 0}
end
return {redis.call('INCR', KEYS[5]), 1}
