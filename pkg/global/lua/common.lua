-- sluice: state encoding and helpers shared by the algorithm scripts.
-- A state is { exists, f, t, a, b } as in pkg/algorithm.State; the sliding
-- log's is { exists, base, first, nadd, addv } (see sliding_log.lua).
-- Numbers are stored with %.17g, which round-trips a double exactly, so the
-- store computes on the same values as the in-memory store.

local EPSILON = 1e-9

local function need(cost)
  if cost < 1 then return 1 end
  return cost
end

local MAX_DURATION = 9007199254740992 -- 2^53 µs, as algorithm.MaxDuration

local function ceil_pos(x)
  if x <= 0 then return 0 end
  if x >= MAX_DURATION then return MAX_DURATION end
  return math.ceil(x)
end

local function floor_non_neg(x)
  x = x + EPSILON
  if x <= 0 then return 0 end
  return math.floor(x)
end

local function num(x)
  return string.format('%.17g', x)
end

local function window_start(now, window)
  return now - math.fmod(now, window)
end

-- Fields stored per kind, in order.
local FIELDS = {
  [0] = { 'f', 't' },      -- token_bucket
  [1] = { 'f' },           -- gcra
  [2] = { 't', 'a', 'b' }, -- sliding_window
  [3] = { 't', 'a' },      -- fixed_window
}

local load_log, store_log -- defined in sliding_log.lua

-- values holds the encoded state of the string-state keys of this call,
-- key -> string, or false where the key has none: filled by one MGET for
-- every request of the call (prefetch) and kept current by store_state, so
-- a request sees what an earlier one of the same call stored.
local values = {}

local function prefetch(keys)
  local i = 1
  while i <= #keys do -- in chunks: unpack is bounded by the Lua stack
    local chunk = {}
    for j = i, math.min(i + 999, #keys) do chunk[#chunk + 1] = keys[j] end
    local got = redis.call('MGET', unpack(chunk))
    for j = 1, #chunk do values[chunk[j]] = got[j] or false end
    i = i + #chunk
  end
end

local function load_state(item)
  if item.kind == 4 then return load_log(item) end
  local v = values[item.key]
  if v == nil then -- not prefetched
    v = redis.call('GET', item.key) or false
    values[item.key] = v
  end
  local st = { exists = false, f = 0, t = 0, a = 0, b = 0 }
  if not v then return st end
  local fields, i = FIELDS[item.kind], 1
  for word in string.gmatch(v, '%S+') do
    st[fields[i]] = tonumber(word)
    i = i + 1
  end
  st.exists = true
  return st
end

local function store_state(item, st, reset)
  if reset <= 0 then
    redis.call('DEL', item.key)
    values[item.key] = false
    return
  end
  local ttl = math.ceil(reset / 1000) -- µs to ms, rounded up
  if item.kind == 4 then return store_log(item, st, ttl) end
  local fields, parts = FIELDS[item.kind], {}
  for i = 1, #fields do parts[i] = num(st[fields[i]]) end
  local v = table.concat(parts, ' ')
  redis.call('SET', item.key, v, 'PX', ttl)
  values[item.key] = v
end
