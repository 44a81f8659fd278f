-- awaiting: one site's awaiting-payload jobs in insertion order (§2.5).
-- Pure read: never settles; entries whose record disagrees are skipped.
-- lib: store
--
-- KEYS[1]  aw:<eS>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  eS
-- Reply: snapshots

local out = {}
for _, eJ in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local m = ARGV[4] .. ':' .. eJ
  if redis.call('HGET', jkey(m), 'state') == AWAITING then
    out[#out + 1] = snapshot(m, false)
  end
end
return out
