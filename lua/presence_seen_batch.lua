-- presence_seen_batch: several heartbeats of one shard in one call, each
-- exactly what presence_seen would do with it (seen_record, lib/presence.lua),
-- decided on its own: one record's failed condition leaves the others
-- written. The batch shares one clock reading and the script call's own
-- overhead, which on an idle fleet is most of a heartbeat's server cost.
-- Store's heartbeat batch (internal/store/batch.go) sends it.
--
-- mode: write
-- lib: presence
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  index        pidx (eR -> insertion counter)
-- KEYS[2]  seq_key      pseq
-- KEYS[3..] records     per record i (from 0), 3 keys at records[1+3i..3+3i]:
--                       p:<eR>, po:<eO>, rsh:<eR> (rsh is read only when
--                       the record's flag below is "1")
-- ARGV[1..3] common  prefix, offset, flags (unused)
-- ARGV[4]  n            the number of records (1..64)
-- ARGV[5..] values      per record i, 10 values at values[1+10i..10+10i]:
--                       eR, runnerId, owner, device (raw JSON), capabilities
--                       (raw JSON), withheld (raw JSON), ttl ms ("0": no
--                       expiry), the heartbeat digest of owner, device and
--                       lists, condition ("1": must exist with this owner
--                       and device, else ""), "1" to answer the rsh record
--                       (else "")
-- Reply: one entry per record, in order: presence_seen's reply for it
-- (empty when its condition does not hold).

local index = KEYS[1]
local seq_key = KEYS[2]
local records = tail(KEYS, 3)
local n = tonumber(ARGV[4])
local values = tail(ARGV, 5)

if not n or n < 1 or n > 64 or #records ~= 3 * n or #values ~= 10 * n then
  return redis.error_reply('ERR relay: presence_seen_batch: KEYS and ARGV do not hold n records')
end
local now = fmt(clock())
local out = {}
for i = 0, n - 1 do
  local k, a = 1 + 3 * i, 1 + 10 * i
  local rsh = nil
  if values[a + 9] == '1' then
    rsh = records[k + 2]
  end
  out[i + 1] = seen_record(records[k], index, seq_key, records[k + 1], rsh, values, a, now)
end
return out
