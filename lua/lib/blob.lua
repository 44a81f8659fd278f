-- lib/blob.lua: how a job record stores its blobs, prepended after
-- lib/common.lua to every script whose header says "-- lib: blob" (each
-- "-- lib: store" script, and the job reads that carry no other library).
--
-- Blobs (stub, pl, rs, cd) are stored so that the record stays a listpack
-- (Valkey's compact hash encoding, kept while every value is at most
-- hash-max-listpack-value bytes, 64 by default, and there are at most
-- hash-max-listpack-entries fields): a blob of at most CHUNK bytes is the
-- field <name> itself; a longer one is its length and its CHUNK-byte
-- slices, in order, under numbered fields (see BASE). A blob over WHOLE bytes is
-- stored whole under <name> as well: it dwarfs what the encoding saves, and
-- slicing it would cost a field per CHUNK bytes.
local CHUNK = 64
local WHOLE = 4096 -- so a sliced blob has at most 64 slices: one command

-- A sliced blob's fields are numbers, which a listpack stores as a small
-- integer (3 bytes with its headers, where "stub.1" would take 8): the
-- blob's base (BASE below) holds its length, base+1 .. base+n its slices.
local BASE = {stub = 100, cd = 200, pl = 300, rs = 400}

-- slice_name(name, i): the field of blob name's slice i (0: its length).
local function slice_name(name, i)
  return tostring(BASE[name] + i)
end

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
  args[#args + 1] = slice_name(name, 0)
  args[#args + 1] = tostring(#v)
  local i = 0
  for at = 1, #v, CHUNK do
    i = i + 1
    args[#args + 1] = slice_name(name, i)
    args[#args + 1] = string.sub(v, at, at + CHUNK - 1)
  end
  return #v
end

-- slice_names(name, n, out) appends the names of blob name's first n
-- slices.
local function slice_names(name, n, out)
  for i = 1, n do
    out[#out + 1] = slice_name(name, i)
  end
  return out
end

-- get_blob(k, name, guess) -> the blob, or nil when the record has none.
-- guess slices are asked for with the head, so a blob of at most guess*64
-- bytes costs one command; a longer one a second.
local function get_blob(k, name, guess)
  local ask = slice_names(name, guess or 0, {name, slice_name(name, 0)})
  local v = redis.call('HMGET', k, unpack(ask))
  if v[1] then
    return v[1]
  end
  local len = v[2]
  if not len then
    return nil
  end
  local n = math.ceil(tonumber(len) / CHUNK)
  if n <= (guess or 0) then
    return table.concat(v, '', 3, n + 2)
  end
  return table.concat(redis.call('HMGET', k, unpack(slice_names(name, n, {}))))
end

-- drop_blob(k, name) removes blob name, whole or sliced, and returns the
-- bytes it held.
local function drop_blob(k, name)
  local len = redis.call('HGET', k, slice_name(name, 0))
  if not len then
    local n = redis.call('HSTRLEN', k, name)
    if n > 0 then
      redis.call('HDEL', k, name)
    end
    return n
  end
  local names = slice_names(name, math.ceil(tonumber(len) / CHUNK), {})
  names[#names + 1] = slice_name(name, 0)
  redis.call('HDEL', k, unpack(names))
  return tonumber(len)
end

-- merge_blobs(flat) -> flat with every sliced blob joined back under its
-- name, as if it were stored whole.
local function merge_blobs(flat)
  local out, parts, whole = {}, {}, {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local name, idx
    local num = string.match(f, '^%d+$') and tonumber(f)
    if num then
      for n, base in pairs(BASE) do
        if num >= base and num < base + 100 then
          name, idx = n, num - base
        end
      end
    end
    if name and idx == 0 then
      whole[#whole + 1] = name
    elseif name then
      parts[name] = parts[name] or {}
      parts[name][idx] = v
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
