-- job_rekey: move one job from one key part of its id to another: its
-- record, its refusals and retry hints, and its member in every index that
-- names it. `relay migrate` runs it, with the relays stopped, to move a
-- UUID id to its compact form (layout v4 to v5, internal/store encJob).
-- Safe to run again: a job already moved has no record under KEYS[1].
-- lib: blob
-- lib: store
--
-- mode: write
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  from        j:<eS>:<eJ>, the record under the key part it has
-- KEYS[2]  to          j:<eS>:<eJ'>, the record under the one it gets
-- ARGV[1..3] common    prefix, offset and flags (unused: no clock, no settling)
-- ARGV[4]  m           member <eS>:<eJ>
-- ARGV[5]  e_to        eJ', the new key part
-- Churn notes ("<leaseId>:m") keep the old member: they are only counted,
-- and leave the five-minute window on their own.
-- Reply: 1 (moved) | 0 (no record under KEYS[1]: moved already, or gone)
--        | error, nothing written, when KEYS[2] holds a record already

local from = KEYS[1]
local to = KEYS[2]
local m = ARGV[4]
local e_to = ARGV[5]

local h = core(m)
if not h then
  return 0
end
if redis.call('EXISTS', to) == 1 then
  return redis.error_reply('ERR relay: job_rekey: ' .. to .. ' holds a record already')
end
local e_from = h.eJ
local m_to = h.eS .. ':' .. e_to

local function rename_member(key, old, new)
  local score = redis.call('ZSCORE', key, old)
  if score then
    redis.call('ZREM', key, old)
    redis.call('ZADD', key, score, new)
  end
end

local function rename_set_member(key, old, new)
  if redis.call('SREM', key, old) == 1 then
    redis.call('SADD', key, new)
  end
end

redis.call('RENAME', from, to)
for _, suffix in ipairs({':ref', ':ra'}) do
  if redis.call('EXISTS', from .. suffix) == 1 then
    redis.call('RENAME', from .. suffix, to .. suffix)
  end
end
rename_member(ready_queue(h), e_from, e_to)
if h.ero then
  rename_member(sticky_queue(h), e_from, e_to)
end
rename_member(P .. 'bad', m, m_to)
rename_set_member(P .. 'uns:' .. h.eS .. ':' .. h.eO, e_from, e_to)
rename_member(P .. 'aw:' .. h.eS, e_from, e_to)
rename_member(P .. 'fin:' .. h.eS, e_from, e_to)
rename_member(P .. 'due', m, m_to)
rename_set_member(live_set(h.eS), e_from, e_to)
if h.cl and redis.call('HGET', P .. 'lease', h.cl) == m then
  redis.call('HSET', P .. 'lease', h.cl, m_to)
end
if h.ecr then
  rename_member(P .. 'cxl:' .. h.ecr, m, m_to)
  rename_member(P .. 'hid:' .. h.ecr, e_from .. ':' .. h.eS, e_to .. ':' .. h.eS)
end
return 1
