-- results_page: one page of a site's finished-job index (§2.6), in insertion
-- order: each done job's index member and seq, nothing else, so a page costs
-- no job-record reads. fin:<eS> lists exactly the site's done jobs, each of
-- which carries a result: complete adds the entry in the script that writes
-- the result and the done state, and forget removes it in the script that
-- deletes the record. A done job's result, disposition and grant never
-- change, and seq is never reused, so Go reads (store.resultsGet) only the
-- results of seqs it has not read before. Pure read.
--
-- The reply opens with the data generation: the namespace's epoch (written
-- by the first enqueue; "" when there is none) and the server's replication
-- id. seq restarts when Valkey loses its data: a restart without
-- persistence or FLUSHALL removes the epoch key, and a failover to a replica
-- that missed the latest writes (which keeps the epoch but rolls seq back)
-- gives the promoted server a new replication id. Go trusts results it
-- cached under a seq only for the generation this page names.
--
-- Runs on a cluster only. On one node Go reads the same three things with
-- plain commands in one pipeline (store.finishedPage says why that is
-- safe), at a fraction of the server's CPU: here every entry becomes a Lua
-- string and then a reply again. On a cluster INFO, which takes no key,
-- would reach any node rather than the one holding the site's slot.
--
-- mode: read-only
-- slot: KEYS[1]'s; every other key is in KEYS or built from KEYS[1]'s prefix (P, lib/common.lua): same hash tag, same slot
-- KEYS[1]  finished    fin:<eS>
-- KEYS[2]  generation
-- ARGV[1..3] common  prefix, offset, churn (unused)
-- ARGV[4]  exclusive   lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[5]  most        entries
-- Reply: flat {epoch, eJ, seq, ...}; fewer than ARGV[5] pairs: the index is
--        exhausted

local finished = KEYS[1]
local generation = KEYS[2]
local exclusive = ARGV[4]
local most = ARGV[5]

local out = redis.call('ZRANGEBYSCORE', finished, exclusive, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(most))
local epoch = redis.call('GET', generation)
if epoch then
  -- The embedded store answers no INFO section "replication" (and cannot
  -- fail over): its generation is the epoch alone.
  local info = redis.pcall('INFO', 'replication')
  if type(info) == 'string' then
    epoch = epoch .. '/' .. (string.match(info, 'master_replid:(%w+)') or '')
  end
end
table.insert(out, 1, epoch or '')
return out
