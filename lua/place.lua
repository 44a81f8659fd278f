-- place: the shard of each named site, placing the ones that have none.
-- A placement is written once and never changed while the site is in use
-- (the record is the only truth; replicas cache it), so a site's keys
-- never split over two shards. With no layout record (Valkey lost its
-- data) the reply is an error coded NOLAYOUT (scriptrun's table).
--
-- Fleet-wide: every key lives on "<ns>:{<ns>}:", beside the layout record
-- that says how new sites are placed (internal/layout placement.go).
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1]  layout       HASH  version, shards, salt
-- KEYS[2]  place        HASH  site id (raw) -> shard index
-- KEYS[3]  placen       HASH  shard index -> sites placed there
-- KEYS[4]  placet       ZSET  site id (raw) -> its last read here (ms,
--                             the store clock): place_reap.lua forgets a
--                             site unread for longer than the retention
-- ARGV[1..3] common  prefix, offset (unused: real time), flags (unused)
-- ARGV[4]  n            shards (the layout record's count)
-- ARGV[5]  groups       the primary each shard's slot is on, one small number
--                       per shard, comma-separated ("0,0,1,..."; all "0" on
--                       a single node)
-- ARGV[6]  most         most sites the record holds
-- ARGV[7..] sites       pairs: site id, pin ("" or a shard index the site
--                       must take when it has none yet)
-- Reply: {shard1, shard2, ...}: each site's shard, in ARGV order; -1 for a
--        site that has none and did not fit under most. Every site
--        answered has its last-read time in placet set to now.
--
-- How a site with no placement is placed:
--   a pin                 -> the pinned shard (tests)
--   otherwise             -> balanced: the primary with the fewest sites,
--                            then its shard with the fewest sites, ties to
--                            the lowest number (a round robin over shards
--                            on a single node)

local layout = KEYS[1]
local place = KEYS[2]
local placen = KEYS[3]
local placet = KEYS[4]
local n = tonumber(ARGV[4])
local groups = ARGV[5]
local most = tonumber(ARGV[6])
local sites = tail(ARGV, 7)

if redis.call('EXISTS', layout) == 0 then
  return redis.error_reply('NOLAYOUT relay: no layout record')
end
if tonumber(redis.call('HGET', layout, 'shards')) ~= n then
  return redis.error_reply('ERR relay: shard count differs from groups layout record')
end

local group = {}
local i = 0
for g in string.gmatch(groups, '[^,]+') do
  group[i] = tonumber(g)
  i = i + 1
end
if i ~= n then
  return redis.error_reply('ERR relay: the groups name ' .. i .. ' shards, want ' .. n)
end

-- Per-shard counts, read once and kept current below.
local count = nil
local function counts()
  if count then
    return count
  end
  count = {}
  local f = {}
  for s = 0, n - 1 do
    f[#f + 1] = tostring(s)
  end
  local v = redis.call('HMGET', placen, unpack(f))
  for s = 0, n - 1 do
    count[s] = tonumber(v[s + 1]) or 0
  end
  return count
end

local function balanced()
  local c = counts()
  local per = {}
  for s = 0, n - 1 do
    per[group[s]] = (per[group[s]] or 0) + c[s]
  end
  local best = nil
  for g, total in pairs(per) do
    if best == nil or total < per[best] or (total == per[best] and g < best) then
      best = g
    end
  end
  local pick = nil
  for s = 0, n - 1 do
    if group[s] == best and (pick == nil or c[s] < c[pick]) then
      pick = s
    end
  end
  return pick
end

local size = nil
-- Real time (TIME), not the store clock with its test offset: replicas
-- age their cached placements by their own clocks (internal/layout).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for a = 1, #sites, 2 do
  local site, pin = sites[a], sites[a + 1]
  local got = redis.call('HGET', place, site)
  if got then
    redis.call('ZADD', placet, fmt(now), site)
    out[#out + 1] = tonumber(got)
  else
    size = size or redis.call('HLEN', place)
    if size >= most then
      out[#out + 1] = -1
    else
      local s
      if pin ~= '' then
        s = tonumber(pin)
      else
        s = balanced()
      end
      if s == nil or s < 0 or s >= n then
        return redis.error_reply('ERR relay: placement out of range')
      end
      redis.call('HSET', place, site, s)
      redis.call('HINCRBY', placen, s, 1)
      redis.call('ZADD', placet, fmt(now), site)
      local c = counts()
      c[s] = c[s] + 1
      size = size + 1
      out[#out + 1] = s
    end
  end
end

return out
