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
local WHOLE = 4096
local BATCH = 200 -- chunks per HSET, HMGET or HDEL (Lua's unpack limit)

local function chunk_names(name, n, first)
  local out = {}
  for i = first, math.min(n, first + BATCH - 1) do
    out[#out + 1] = name .. '.' .. i
  end
  return out
end

-- put_blob(k, name, v): store blob v under name. The field must be absent
-- (every writer writes a blob once, or drops it first).
local function put_blob(k, name, v)
  if #v <= CHUNK or #v > WHOLE then
    redis.call('HSET', k, name, v)
    return
  end
  redis.call('HSET', k, name .. '#', tostring(#v))
  local n = math.ceil(#v / CHUNK)
  for first = 1, n, BATCH do
    local args = {}
    for i = first, math.min(n, first + BATCH - 1) do
      args[#args + 1] = name .. '.' .. i
      args[#args + 1] = string.sub(v, (i - 1) * CHUNK + 1, i * CHUNK)
    end
    redis.call('HSET', k, unpack(args))
  end
end

-- get_blob(k, name) -> the blob, or nil when the record has none.
local function get_blob(k, name)
  local v = redis.call('HMGET', k, name, name .. '#')
  if v[1] or not v[2] then
    return v[1] or nil
  end
  local n = math.ceil(tonumber(v[2]) / CHUNK)
  local parts = {}
  for first = 1, n, BATCH do
    for _, s in ipairs(redis.call('HMGET', k, unpack(chunk_names(name, n, first)))) do
      parts[#parts + 1] = s
    end
  end
  return table.concat(parts)
end

-- drop_blob(k, name): remove blob name, in either form.
local function drop_blob(k, name)
  local len = redis.call('HGET', k, name .. '#')
  if not len then
    redis.call('HDEL', k, name)
    return
  end
  redis.call('HDEL', k, name, name .. '#')
  local n = math.ceil(tonumber(len) / CHUNK)
  for first = 1, n, BATCH do
    redis.call('HDEL', k, unpack(chunk_names(name, n, first)))
  end
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
