-- results_page: one page of a site's finished-job index (§2.6), in insertion
-- order: each done job's index member and seq, nothing else, so a page costs
-- no job-record reads. fin:<eS> lists exactly the site's done jobs, each of
-- which carries a result: complete adds the entry in the script that writes
-- the result and the done state, and forget removes it in the script that
-- deletes the record. A done job's result, disposition and grant never
-- change, and seq is never reused, so Go fetches with results_get only the
-- results of seqs it has not read before. Pure read.
--
-- The reply opens with the namespace's epoch (written by the first enqueue,
-- "" when there is none): seqs restart when Valkey loses its data, so Go
-- trusts results it cached under a seq only for the epoch this page names.
--
-- KEYS[1]  fin:<eS>   KEYS[2]  epoch
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  exclusive lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[5]  most entries
-- Reply: flat {epoch, eJ, seq, ...}; fewer than ARGV[5] pairs: the index is
--        exhausted

local out = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[5]))
table.insert(out, 1, redis.call('GET', KEYS[2]) or '')
return out
