-- lib/common.lua: prepended to every script (see lua/lua.go).
--
-- Calling convention shared by every script:
--   ARGV[1]  KEYS[1]'s prefix "<ns>:{<tag>}:" (checked below). Every other key
--            a script touches is either in KEYS or built from this prefix:
--            same hash tag, so same slot as KEYS[1], by construction.
--   ARGV[2]  clock offset in ms (always "0" in production; tests move it)
--   ARGV[3]  flags: first "1" when the store has a churn callback, else "0";
--            second "1" when queue entries are announced (both lib/store.lua)
-- Op-specific ARGV start at 4.
--
-- Numbers cross the Lua boundary as decimal strings: Lua numbers are doubles,
-- and Lua 5.1's tostring keeps only 14 significant digits, so fmt() is the
-- only way a computed instant is written anywhere.

-- How a script is built (internal/store library.go): the relay loads every
-- operation as one Valkey Functions library (FUNCTION LOAD; FCALL and
-- FCALL_RO run them), so this file and the libraries after it are
-- defined once when the library loads, not on every call; a server
-- without FUNCTION gets each operation as its own script (EVALSHA), the
-- same code after a first line that binds the globals. Either way the
-- locals below are the call's own: begin() sets them first thing in
-- every call, before the operation's body runs. Nothing else here may
-- read KEYS, ARGV or a library function at load time (a library loads
-- without string, table and the rest of Lua's standard library).
--
--   KEYS, ARGV  the call's keys and args (declared by the first line)
--   P           KEYS[1]'s prefix, checked against ARGV[1]
--   REPORTS     churn reports raised during the call (lib/store.lua
--               note_churn): {eS, eO, count} (Go decodes them); every settling
--               script returns them so Go can call OnChurn after the write
local P, REPORTS

-- begin(keys, argv) starts a call: nil, or the error reply to return.
-- KEYS' last entry is the migration guard P .. 'mguard', a key never
-- written (internal/store GuardKey): declaring it makes a cluster refuse
-- the whole call up front while its slot migrates, instead of aborting
-- it half-way at the first undeclared key already moved. It is taken off
-- here, before any script body looks at KEYS or #KEYS.
local function begin(keys, argv)
  KEYS, ARGV = keys, argv
  local guard = table.remove(KEYS)
  P = KEYS[1] and string.match(KEYS[1], '^[^{]*{[^}]*}:')
  if not P or P ~= ARGV[1] then
    return redis.error_reply('ERR relay: ARGV[1] is not the prefix of KEYS[1]')
  end
  if guard ~= P .. 'mguard' then
    return redis.error_reply('ERR relay: the last key is not the migration guard of KEYS[1]\'s prefix')
  end
  REPORTS = {}
  return nil
end

-- tail(t, i) is t[i], t[i + 1], ... as a list of its own: how a script
-- binds a variable-length run of its KEYS or ARGV to a name (the header
-- grammar, lua/bindings_test.go). A loop, not unpack, which has a limit.
local function tail(t, i)
  local out = {}
  for j = i, #t do
    out[#out + 1] = t[j]
  end
  return out
end

-- on_shard(key, f) runs f with P set to key's prefix and sets it back
-- after, answering what f answers (values that are not nil). Only for a
-- call that may span shards, which only a server that is not a cluster
-- takes (a claim's sections, presence_beat's renewals): key must be in
-- KEYS, and f builds keys from P as any script body does, now on key's
-- shard.
local function on_shard(key, f)
  local home = P
  P = string.match(key, '^[^{]*{[^}]*}:')
  local r = {f()}
  P = home
  return unpack(r)
end

local function fmt(x)
  return string.format('%.0f', x)
end

-- now in ms from the server's TIME plus the test offset. A script calls it
-- exactly once: one clock reading per decision.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
end

-- next_seq(key) is the next first-enqueue order number of KEYS[1]'s shard:
-- the server's TIME in microseconds, or one more than the shard's last
-- number if that is later. Within a shard it strictly increases; across
-- shards (and cluster nodes) numbers compare as enqueue instants, which is
-- what a claim spanning shards orders by. The test offset is left out: it
-- moves deadlines, not order. Below 2^53 until the year 2255.
local function next_seq(key)
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', key) or '0')
  if last >= us then
    us = last + 1
  end
  local s = fmt(us)
  redis.call('SET', key, s)
  return s
end
