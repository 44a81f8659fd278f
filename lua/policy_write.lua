-- policy_write: apply one policy change atomically: a whole document (PUT),
-- a merge, or one act of the store contract's write surface (consent,
-- revoke, pause, resume, add or remove a member). Go validated everything;
-- every id arrives base64url-encoded (⟨x⟩), so fields joined with ':' never
-- collide whatever the ids hold.
--
-- mode: write
-- slot: every key is fleet-wide ("<ns>:{<ns>}:"), one slot by construction
-- KEYS[1]  consents     pol:c (HASH ⟨S⟩:⟨U⟩ -> mappings JSON)
-- KEYS[2]  pause_set    pol:p (SET ⟨S⟩:⟨U⟩)
-- KEYS[3]  team_owners  pol:towners (SET ⟨O⟩); team sets pol:t:⟨O⟩ are named
--                       from the prefix
-- KEYS[4]  declared     pol:d (HASH ⟨S⟩ -> purposes JSON)
-- KEYS[5]  version      pol:v (STR version)
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  mode         "replace" (drop the whole policy first) or "merge"
-- ARGV[5..] sections    five sections, each a count followed by its items:
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

local consents = KEYS[1]
local pause_set = KEYS[2]
local team_owners = KEYS[3]
local declared = KEYS[4]
local version = KEYS[5]
local mode = ARGV[4]
local sections = tail(ARGV, 5)

local function team(eo) return P .. 'pol:t:' .. eo end

local changed = mode == 'replace'
if changed then
  for _, eo in ipairs(redis.call('SMEMBERS', team_owners)) do
    redis.call('DEL', team(eo))
  end
  redis.call('DEL', consents, pause_set, team_owners, declared)
end

local i = 1
local function take()
  local v = sections[i]
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
  if redis.call('HGET', consents, f) ~= m then
    redis.call('HSET', consents, f, m)
    changed = true
  end
  if paused == '1' then
    mark(redis.call('SADD', pause_set, f))
  else
    mark(redis.call('SREM', pause_set, f))
  end
end

n = tonumber(take())
for _ = 1, n do
  local f = take()
  mark(redis.call('HDEL', consents, f))
  mark(redis.call('SREM', pause_set, f))
end

n = tonumber(take())
for _ = 1, n do
  local f, on = take(), take()
  if on == '1' then
    mark(redis.call('SADD', pause_set, f))
  else
    mark(redis.call('SREM', pause_set, f))
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
    mark(redis.call('SADD', team_owners, eo))
  else
    mark(redis.call('SREM', team_owners, eo))
  end
end

n = tonumber(take())
for _ = 1, n do
  local eo, eu, on = take(), take(), take()
  if on == '1' then
    mark(redis.call('SADD', team(eo), eu))
    mark(redis.call('SADD', team_owners, eo))
  else
    mark(redis.call('SREM', team(eo), eu))
    if redis.call('SCARD', team(eo)) == 0 then
      mark(redis.call('SREM', team_owners, eo))
    end
  end
end

n = tonumber(take())
for _ = 1, n do
  local es, purposes = take(), take()
  if redis.call('HGET', declared, es) ~= purposes then
    redis.call('HSET', declared, es, purposes)
    changed = true
  end
end

if not changed then
  return {tonumber(redis.call('GET', version)) or 0, 0}
end
return {redis.call('INCR', version), 1}
