-- seal: the site hands over the payload sealed to the claiming device
-- (§2.11). No lease, recipient, cancel or window check; settling first
-- (§9.8) turns a seal after the window into too-late/queued or not-found.
-- Clears awaitingUntil and sealAttempts, never reofferTo.
-- lib: store
--
-- KEYS[1]  j:<eS>:<eJ>
-- ARGV[1..3] prefix, offset, churn flag
-- ARGV[4]  member <eS>:<eJ>   ARGV[5]  envelope (raw JSON)
-- Reply: {'ready', reports} | {'not-found', reports} | {'too-late', was, reports}

local m = ARGV[4]
local now = clock()
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not-found', REPORTS}
end
settle(m, now, false)
local h = core(m)
if not h then
  return {'not-found', REPORTS}
end
if h.state ~= AWAITING then
  return {'too-late', h.state, REPORTS}
end
redis.call('HSET', KEYS[1], 'pl', ARGV[5], 'state', READY)
move_state(m, AWAITING, READY)
redis.call('HDEL', KEYS[1], 'au', 'sa')
leave_awaiting(h)
h.state, h.au, h.sa = READY, nil, nil
rescore(m, h)
return {'ready', REPORTS}
