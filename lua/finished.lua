-- finished: one site's done jobs that carry a result, in insertion order
-- (§2.6). Pure read: never settles.
-- lib: store
--
-- KEYS[1]  fin:<eS>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eS
-- Reply: snapshots

local out = {}
for _, eJ in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local m = ARGV[4] .. ':' .. eJ
  local v = redis.call('HMGET', jkey(m), 'state', 'rs')
  if v[1] == DONE and v[2] then
    out[#out + 1] = snapshot(m, false)
  end
end
return out
