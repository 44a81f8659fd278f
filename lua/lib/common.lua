-- lib/common.lua: prepended to every script (see lua/lua.go).
--
-- Calling convention shared by every script:
--   ARGV[1]  key prefix "<ns>:{<ns>}:"; every key of the store starts with it,
--            so all keys share one hash tag (mode G, one slot)
--   ARGV[2]  clock offset in ms (always "0" in production; tests move it)
--   ARGV[3]  "1" when the store has a churn callback, else "0"
-- Op-specific ARGV start at 4.
--
-- Numbers cross the Lua boundary as decimal strings: Lua numbers are doubles,
-- and Lua 5.1's tostring keeps only 14 significant digits, so fmt() is the
-- only way a computed instant is written anywhere.

local P = ARGV[1]

local function fmt(x)
  return string.format('%.0f', x)
end

-- now in ms from the server's TIME plus the test offset. A script calls it
-- exactly once: one clock reading per decision.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
end
