-- lib/pages.lua: paged reads of seq-scored indexes, prepended after
-- lib/store.lua (it uses snapshot) to the scripts whose header says
-- "-- lib: pages".

-- add_snapshot(out, m, bytes) appends the full snapshot of job m (a
-- member <eS>:<eJ>) to out, if its record still exists, and returns bytes
-- plus the size of the snapshot's blobs (what a page counts against its
-- byte budget), and whether it appended one.
local function add_snapshot(out, m, bytes)
  local s = snapshot(m, false)
  if s then
    out[#out + 1] = s
    for _, v in ipairs(s[1]) do
      bytes = bytes + #v
    end
  end
  return bytes, s ~= nil
end

-- page_of(index, e_site, after, limit, budget, keep) reads one page of a
-- seq-scored index: the full snapshots of the entries keep(m) accepts,
-- examining at most limit entries and ending early once the snapshots hold
-- budget bytes (always after at least one), so one call stays short however
-- large the index or its envelopes. Members are <eJ> when e_site is given,
-- else whole members <eS>:<eJ>. Reply: {cursor, snapshots...}, cursor being
-- the seq of the last entry examined, or '' once the index is exhausted.
local function page_of(index, e_site, after, limit, budget, keep)
  local page = redis.call('ZRANGEBYSCORE', index, after, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  local out = {''}
  local bytes = 0
  for i = 1, #page, 2 do
    out[1] = page[i + 1]
    local m = page[i]
    if e_site then
      m = e_site .. ':' .. m
    end
    if keep(m) then
      local added
      bytes, added = add_snapshot(out, m, bytes)
      if added and bytes >= budget then
        return out
      end
    end
  end
  if #page < 2 * limit then
    out[1] = ''
  end
  return out
end
