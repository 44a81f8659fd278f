-- touch: the floor's one store call per request: stamp the client's hash
-- and count its requests. Not the relay's; test/bench/floor's own.
--
-- mode: write
-- slot: KEYS[1]'s
-- KEYS[1]  <namespace>:<client id>
-- ARGV[1]  issued-at of the request, ms
-- Reply: the client's request count so far

redis.call('HSET', KEYS[1], 'at', ARGV[1])
return redis.call('HINCRBY', KEYS[1], 'n', 1)
