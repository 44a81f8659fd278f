-- ops_presence: several runners' presence at once, for the operations
-- view's device lists (one call per page instead of one per device). Pure
-- read, O(1) per key. A presence record lives on its runner's shard, so Go
-- runs this once per shard, with the runners of that shard only.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
--
-- KEYS[1..] records     p:<eR> of each runner asked about
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- Reply: {owner, lastSeenAt, capabilities (raw JSON)} per key, in KEYS
--        order, each "" when the runner has no record

local records = tail(KEYS, 1)

local out = {}
for i, record in ipairs(records) do
  local v = redis.call('HMGET', record, 'owner', 'lastSeenAt', 'capabilities')
  out[#out + 1] = v[1] or ''
  out[#out + 1] = v[2] or ''
  out[#out + 1] = v[3] or ''
end
return out
