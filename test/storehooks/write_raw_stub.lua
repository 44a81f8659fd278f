-- write_raw_stub: test hook of the store contract (case 13), run through
-- store.RunJobScript, never shipped in lua/: overwrite the
-- stored stub bytes of a job, as an older version might have written them.
-- The denormalised routing fields are left alone, as they would be. A job
-- quarantined earlier gets a fresh chance in its ready queue.
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  job       j:<eS>:<eJ>
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  m           member <eS>:<eJ>
-- ARGV[5]  raw_stub     stub bytes
-- Reply: 1 | 0 (no such job)

local job = KEYS[1]
local m = ARGV[4]
local raw_stub = ARGV[5]

local h = core(m)
if not h then
  return 0
end
local was = drop_blob(job, 'stub')
local rec = {}
local size = blob_args('stub', raw_stub, rec)
redis.call('HSET', job, unpack(rec))
account(m, h.eS, size - was)
if h.bad == '1' then
  redis.call('HDEL', job, 'bad')
  redis.call('ZREM', P .. 'bad', m)
  h.bad = nil
  if h.state == QUEUED and h.cx ~= '1' then
    local qk, qm = queue_of(h)
    redis.call('ZADD', qk, h.seq, qm)
  end
end
return 1
