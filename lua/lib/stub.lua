-- lib/stub.lua: the strict JobStub check of §3.5 for stored stub bytes,
-- prepended to the scripts whose header says "-- lib: stub" (claim only).
-- Kept apart from lib/store.lua because building its tables costs every
-- script that carries them some 20 µs per call.

-- §3.5 strict JobStub check for stored bytes that no longer parse.
local STUB_FIELDS = {id = 'str', kind = 'kind', owner = 'str', site = 'str',
  audience = 'aud', purpose = 'str', sizeClass = 'size', streaming = 'bool', deadlineAt = 'int'}
local STUB_REQUIRED = {'id', 'kind', 'owner', 'site', 'audience', 'sizeClass', 'streaming', 'deadlineAt'}
local STUB_ENUMS = {
  kind = {['llm.generate'] = true, ['llm.chat'] = true},
  aud = {private = true, team = true},
  size = {small = true, medium = true, large = true, unbounded = true},
}

-- True when the JSON text has a null literal outside string literals. No
-- stub field may be null, and miniredis' cjson turns null into a missing key
-- instead of cjson.null, so this is checked on the text.
local function has_null(raw)
  -- A null literal is the four bytes null; text without them has none.
  -- The scan below costs some 100,000 server instructions for a typical
  -- stub, the plain search about 1,300.
  if not string.find(raw, 'null', 1, true) then
    return false
  end
  local i = 1
  while true do
    local j = string.find(raw, '["n]', i)
    if not j then
      return false
    end
    if string.sub(raw, j, j) == 'n' then
      return true
    end
    local k = j + 1
    while true do
      local q = string.find(raw, '["\\]', k)
      if not q then
        return true -- unterminated string: not JSON anyway
      end
      if string.sub(raw, q, q) == '\\' then
        k = q + 2
      else
        i = q + 1
        break
      end
    end
  end
end

local function valid_stub(raw)
  if type(raw) ~= 'string' or has_null(raw) then
    return false
  end
  local ok, t = pcall(cjson.decode, raw)
  if not ok or type(t) ~= 'table' then
    return false
  end
  for k, v in pairs(t) do
    local want = STUB_FIELDS[k]
    if not want then
      return false
    end
    if want == 'bool' then
      if type(v) ~= 'boolean' then
        return false
      end
    elseif want == 'int' then
      if type(v) ~= 'number' or v ~= math.floor(v) or v <= 0 or v > 9007199254740991 then
        return false
      end
    else
      if type(v) ~= 'string' or #v == 0 then
        return false
      end
      local enum = STUB_ENUMS[want]
      if enum and not enum[v] then
        return false
      end
    end
  end
  for _, f in ipairs(STUB_REQUIRED) do
    if t[f] == nil then
      return false
    end
  end
  return true
end
