-- sluice: state encoding and helpers shared by the algorithm scripts.
-- A state is { exists, f, t, a, b } as in pkg/algorithm.State; the sliding
-- log's and the concurrency limit's are their own (see sliding_log.lua and
-- concurrency.lua).
-- Numbers are stored as text with %.17g, which round-trips a double
-- exactly, or packed as doubles (encode), so the store computes on the
-- same values as the in-memory store.

-- The library functions the scripts call most, as locals: Redis's Lua
-- looks a global up in a table at every call, and these are called some
-- thirty times a decision (0.4 µs of 6). A function library may not read
-- globals while it loads, so bind sets them at the start of every call.
local floor, ceil, min, max, fmod, byte, find, format, sub, spack, sunpack, tonum, call

local function bind()
  floor, ceil, min, max, fmod = math.floor, math.ceil, math.min, math.max, math.fmod
  byte, find, format, sub = string.byte, string.find, string.format, string.sub
  spack, sunpack, tonum, call = struct.pack, struct.unpack, tonumber, redis.call
end

local EPSILON = 1e-9

local function need(cost)
  if cost < 1 then return 1 end
  return cost
end

local MAX_DURATION = 9007199254740992 -- 2^53 µs, as algorithm.MaxDuration

local function ceil_pos(x)
  if x <= 0 then return 0 end
  if x >= MAX_DURATION then return MAX_DURATION end
  return ceil(x)
end

local function floor_non_neg(x)
  x = x + EPSILON
  if x <= 0 then return 0 end
  return floor(x)
end

local function num(x)
  return format('%.17g', x)
end

-- window_start: windows start at origin + k × window (origin 0: on the epoch).
local function window_start(now, window, origin)
  local r = fmod(now - origin, window)
  if r < 0 then r = r + window end
  return now - r
end

-- ALGORITHMS maps a kind (pkg/algorithm.Kind) to its module: a table
-- with decide(st, p, now, cost, force), and either fields (its state is a
-- string of these numbers, in this order) or load(item) and store(item,
-- st, ttl) for a state of its own shape; past the file's refund marker,
-- refund(st, p, taken, cost) or refund_key(item, taken, cost), which only
-- the refund script includes (Redis runs a script's whole body on every
-- call, so the decide script carries nothing it does not use). One Lua
-- file per algorithm defines its module; the table itself is generated
-- from pkg/algorithm's (see scripts.go).
local ALGORITHMS

local function algorithm_of(kind)
  local a = ALGORITHMS[kind]
  if not a then error('unknown algorithm ' .. tostring(kind)) end
  return a
end


-- values holds the encoded state of the string-state keys of this call,
-- key -> string, or false where the key has none: filled by one MGET for
-- every request of the call (prefetch) and kept current by store_state, so
-- a request sees what an earlier one of the same call stored.
local values = {}

local function prefetch(keys)
  local i = 1
  while i <= #keys do -- in chunks: unpack is bounded by the Lua stack
    local chunk = {}
    for j = i, min(i + 999, #keys) do chunk[#chunk + 1] = keys[j] end
    local got = call('MGET', unpack(chunk))
    for j = 1, #chunk do values[chunk[j]] = got[j] or false end
    i = i + #chunk
  end
end

-- encode is a string state as stored: its fields, in order, as text
-- (one string.format: the states have one to three fields), or packed: a
-- version byte, 1, then each field a little-endian double, which no text
-- state starts with. Packing costs Redis 0.7 µs less a decision than
-- formatting, and reading it less than parsing; every server reads both,
-- and writes packed only when told (pkg/global.RedisOptions.PackedState),
-- so that servers of a version that reads text alone never meet it.
local FORMATS = { '%.17g', '%.17g %.17g', '%.17g %.17g %.17g' }
local PACKED = { '<Bd', '<Bdd', '<Bddd' }
local PACKED_VERSION = 1

local function encode(a, st, packed)
  local f = a.fields
  if packed then
    return spack(PACKED[#f], PACKED_VERSION, st[f[1]], st[f[2]], st[f[3]]) -- past the format's: ignored
  end
  return format(FORMATS[#f], st[f[1]], st[f[2]], st[f[3]]) -- st[nil] is nil: ignored
end

-- load_state reads item's state; a string state is read into st when
-- given (a table to reuse), else into a new table.
local function load_state(item, st)
  local a = algorithm_of(item.kind)
  if a.load then return a.load(item) end
  local v = values[item.key]
  if v == nil then -- not prefetched
    v = call('GET', item.key) or false
    values[item.key] = v
  end
  if st then
    st.exists, st.f, st.t, st.a, st.b, st.packed = false, 0, 0, 0, 0, false
  else
    st = { exists = false, f = 0, t = 0, a = 0, b = 0, packed = false }
  end
  if not v then return st end
  local fields = a.fields
  if byte(v, 1) == PACKED_VERSION then
    if #v ~= 1 + 8 * #fields then error('a packed state of ' .. #v .. ' bytes for ' .. #fields .. ' fields') end
    local _, x, y, z = sunpack(PACKED[#fields], v)
    st[fields[1]] = x
    if fields[2] then st[fields[2]] = y end
    if fields[3] then st[fields[3]] = z end
    st.exists, st.packed = true, true
    return st
  end
  local at = 1
  for i = 1, #fields do -- fields are separated by one space
    local sp = find(v, ' ', at, true) or #v + 1
    st[fields[i]] = tonum(sub(v, at, sp - 1))
    at = sp + 1
  end
  st.exists = true
  return st
end

local function store_state(item, st, reset)
  local a = algorithm_of(item.kind)
  if a.keep then reset = a.keep(item, reset) end -- algorithm.Keep
  if reset <= 0 then
    call('DEL', item.key)
    values[item.key] = false
    return
  end
  local ttl = ceil(reset / 1000) -- µs to ms, rounded up
  if a.store then return a.store(item, st, ttl) end
  local v = encode(a, st, item.packed)
  call('PSETEX', item.key, ttl, v)
  values[item.key] = v
end

-- decide runs an item's algorithm, as pkg/algorithm.Decide: force records
-- the cost even where it does not fit and answers as a zero-cost check
-- right after would: for the next request; count records it too, but
-- answers with the verdict a take would have given (the reference's
-- counting), and what is left after. A plain decision (none of the three)
-- may write its new state and result into ost and ores, tables of the
-- caller's that are neither st nor read again before it has used them;
-- an algorithm that does not take them returns tables of its own.
local function decide(st, p, now, cost, force, count, giveback, ost, ores)
  local a = algorithm_of(p.kind)
  if giveback then
    -- A refund (algorithm.GiveBack): never refused; the key as it is
    -- after it, checked at zero cost. Its retry, always 0, carries what it
    -- gave back (Result.Given; pkg/global's readDecide).
    local given = 0
    if cost > 0 then st, given = a.give_back(st, p, now, cost) end
    local _, r = a.decide(st, p, now, 0, false)
    r.allowed, r.retry = true, given
    return st, r
  end
  if force or count then
    local verdict
    if count then
      local _, v = a.decide(st, p, now, cost, false)
      verdict = v.allowed
    end
    -- A record of hits admitted age µs ago goes in the window that held
    -- them (algorithm.Record): the age within [0, window].
    local age = min(max(p.age or 0, 0), p.window)
    if force and a.record and age > 0 and cost > 0 then
      st = a.record(st, p, now, now - age, cost)
    else
      -- force: true for a force, 'count' for count's hits (algorithm.Count)
      st = a.decide(st, p, now, cost, force or 'count')
    end
    local _, r = a.decide(st, p, now, 0, false)
    if count then
      r.allowed = verdict
      if verdict then r.retry = 0 end
    end
    return st, r
  end
  return a.decide(st, p, now, cost, false, ost, ores)
end
