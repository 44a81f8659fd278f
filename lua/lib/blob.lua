-- lib/blob.lua: how a job record stores its blobs, prepended after
-- lib/common.lua to every script whose header says "-- lib: blob" (each
-- "-- lib: store" script, and the job reads that carry no other library).
--
-- Blobs (stub, pl, rs, cd) are stored so that the record stays a listpack
-- (Valkey's compact hash encoding, kept while every value is at most
-- hash-max-listpack-value bytes, 64 by default, and there are at most
-- hash-max-listpack-entries fields): a blob of at most CHUNK bytes is the
-- field <name> itself; a longer one is <name># (its length) and <name>.1 ..
-- <name>.n (its CHUNK-byte slices, in order). A blob over WHOLE bytes is
-- stored whole under <name> as well: it dwarfs what the encoding saves, and
-- slicing it would cost a field per CHUNK bytes. Records written before
-- layout v3 hold every blob whole under <name>; the readers take both.
local CHUNK = 64
local WHOLE = 4096 -- so a sliced blob has at most 64 slices: one command

-- blob_args(name, v, args) appends to args the HSET field/value pairs that
-- store blob v under name (the writer's own HSET carries them, so a blob
-- costs no command of its own), and returns #v. The record must hold no
-- blob name (every writer writes a blob once, or drops it first).
local function blob_args(name, v, args)
  if #v <= CHUNK or #v > WHOLE then
    args[#args + 1] = name
    args[#args + 1] = v
    return #v
  end
  args[#args + 1] = name .. '#'
  args[#args + 1] = tostring(#v)
  local i = 0
  for at = 1, #v, CHUNK do
    i = i + 1
    args[#args + 1] = name .. '.' .. i
    args[#args + 1] = string.sub(v, at, at + CHUNK - 1)
  end
  return #v
end

local function chunk_names(name, n)
  local out = {}
  for i = 1, n do
    out[i] = name .. '.' .. i
  end
  return out
end

-- get_blob(k, name, guess) -> the blob, or nil when the record has none.
-- guess slices are asked for with the head, so a blob of at most guess*64
-- bytes costs one command; a longer one a second.
local function get_blob(k, name, guess)
  local ask = chunk_names(name, guess or 0)
  table.insert(ask, 1, name .. '#')
  table.insert(ask, 1, name)
  local v = redis.call('HMGET', k, unpack(ask))
  if v[1] or not v[2] then
    return v[1] or nil
  end
  local n = math.ceil(tonumber(v[2]) / CHUNK)
  if n <= (guess or 0) then
    return table.concat(v, '', 3, n + 2)
  end
  return table.concat(redis.call('HMGET', k, unpack(chunk_names(name, n))))
end

-- drop_blob(k, name) removes blob name, in either form, and returns the
-- bytes it held.
local function drop_blob(k, name)
  local len = redis.call('HGET', k, name .. '#')
  if not len then
    local n = redis.call('HSTRLEN', k, name)
    if n > 0 then
      redis.call('HDEL', k, name)
    end
    return n
  end
  local names = chunk_names(name, math.ceil(tonumber(len) / CHUNK))
  names[#names + 1] = name .. '#'
  redis.call('HDEL', k, unpack(names))
  return tonumber(len)
end

-- merge_blobs(flat) -> flat with every chunked blob joined back under its
-- name: what HGETALL of a pre-v3 record would have answered.
local function merge_blobs(flat)
  local out, parts, whole = {}, {}, {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local name, idx = string.match(f, '^(%a+)%.(%d+)$')
    if name then
      parts[name] = parts[name] or {}
      parts[name][tonumber(idx)] = v
    elseif string.sub(f, -1) == '#' then
      whole[#whole + 1] = string.sub(f, 1, -2)
    else
      out[#out + 1] = f
      out[#out + 1] = v
    end
  end
  for _, name in ipairs(whole) do
    out[#out + 1] = name
    out[#out + 1] = table.concat(parts[name] or {})
  end
  return out
end
