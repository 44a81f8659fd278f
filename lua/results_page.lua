-- results_page: one page of a site's finished-job index (§2.6), in insertion
-- order: each done job's index member and seq, nothing else, so a page costs
-- no job-record reads. fin:<eS> lists exactly the site's done jobs, each of
-- which carries a result: complete adds the entry in the script that writes
-- the result and the done state, and forget removes it in the script that
-- deletes the record. A done job's result, disposition and grant never
-- change, and seq is never reused, so Go fetches with results_get only the
-- results of seqs it has not read before. Pure read.
--
-- KEYS[1]  fin:<eS>
-- ARGV[1..3] prefix, offset, churn (unused)
-- ARGV[4]  exclusive lower seq bound ("-inf" for the first page, else "(<seq>")
-- ARGV[5]  most entries
-- Reply: flat {eJ, seq, ...}; fewer than ARGV[5] pairs: the index is exhausted

return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[5]))
