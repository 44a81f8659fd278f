-- place_reap: forget the sites of the placement record that no replica
-- has read through place.lua for longer than the retention (internal/layout
-- Placer.Reap). Reads only the head of the record's index placet, never the
-- dataset: at most ARGV[5] entries whose last read is before now -
-- retention. Go checks each listed site's shard for state first and
-- passes back which to forget and which to keep: a forgotten site loses
-- its entry in place and placet and its count in placen, here, only if
-- its last read is still before the cut (a replica that read it since
-- keeps it); a kept one (still holding state) has its last read set to
-- now, so the head moves on.
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  place       HASH  site id (raw) -> shard index
-- KEYS[2]  placen      HASH  shard index -> sites placed there
-- KEYS[3]  placet      ZSET  site id (raw) -> its last read through place.lua (ms)
-- ARGV[1..3] common  prefix, offset (unused: real time), flags (unused)
-- ARGV[4]  retention   ms (> 0)
-- ARGV[5]  limit       most due entries listed (1..128)
-- ARGV[6]  nforget     how many of the sites that follow to forget
-- ARGV[7..] sites      nforget sites to forget, then sites to keep
-- Reply: {forgotten, site1, shard1, site2, shard2, ...}: how many sites
--        were forgotten, then the next due entries (at most limit) and
--        their shards

local place = KEYS[1]
local placen = KEYS[2]
local placet = KEYS[3]
local retention = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local nforget = tonumber(ARGV[6])
local sites = tail(ARGV, 7)

if not retention or retention <= 0 or not limit or limit < 1 or limit > 128 or not nforget or nforget > #sites then
  return redis.error_reply('ERR relay: place_reap: retention must be positive, the limit 1..128 and nforget at most the sites')
end
-- Real time (TIME), not the store clock with its test offset: replicas
-- age their cached placements by their own clocks (internal/layout).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cut = now - retention

local gone = 0
for i, site in ipairs(sites) do
  local t = tonumber(redis.call('ZSCORE', placet, site) or '')
  if i <= nforget then
    if t and t < cut then
      local sh = redis.call('HGET', place, site)
      redis.call('HDEL', place, site)
      redis.call('ZREM', placet, site)
      if sh then
        if redis.call('HINCRBY', placen, sh, -1) <= 0 then
          redis.call('HDEL', placen, sh)
        end
        gone = gone + 1
      end
    end
  elseif t and t < cut then
    redis.call('ZADD', placet, fmt(now), site)
  end
end

local out = {gone}
local due = redis.call('ZRANGEBYSCORE', placet, '-inf', '(' .. fmt(cut), 'LIMIT', 0, limit)
for _, site in ipairs(due) do
  local sh = redis.call('HGET', place, site)
  if sh then
    out[#out + 1] = site
    out[#out + 1] = sh
  else
    redis.call('ZREM', placet, site)
  end
end
return out
