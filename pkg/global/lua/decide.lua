-- sluice: decide the limits of one or more requests, each atomically and
-- all or nothing, one after the other as if each were its own call.
-- Mirrors pkg/algorithm (DecideAll and the algorithms) line for line;
-- the Go differential tests hold the two to the same results.
--
-- The arguments and the reply are packed (little-endian, struct's formats),
-- so that neither side formats or parses a number as text, nor Redis
-- splits six arguments per item (see pkg/global/pack.go):
--
-- KEYS      the items' state keys, request after request
-- ARGV[1]   per request: now (d, µs; negative: read the store's clock,
--           once per call, so the requests of one call share an instant),
--           n (H, its items), then per item ITEM: kind (B, pkg/algorithm.Kind:
--           the ALGORITHMS table), flags (B: 1 force, consume even when it
--           does not fit; 2 shadow; 4 count, consume and judge as a take;
--           8 give back, a refund: algorithm.GiveBack; 16 a holder
--           follows, in ARGV[2...]; 32 store the state packed, see
--           common.lua's encode), limit, window µs, burst, cost,
--           origin µs (d: where windows start, pkg/algorithm.Params.Origin),
--           age µs (d: a force's hits were admitted that long ago,
--           algorithm.Record)
-- ARGV[2...] the holders (algorithm.Params.Holder, a string: no room in a
--           fixed-size item) of the items flagged 16, item after item,
--           request after request
-- Returns one string: per request now (d; -1 when its decision failed,
-- the error in Redis's log), then per item REPLY: allowed (B), remaining,
-- retry µs, reset µs, left (d: remaining unrounded).

local HEADER, HEADER_SIZE = '<dH', 10
local ITEM, ITEM_SIZE = '<BBdddddd', 50
local REPLY = '<Bdddd'
-- The call's KEYS, ARGV and packed requests (ARGV[1]), set by the driver,
-- so that what follows up to it closes over no call's own: a function
-- library defines it once, a script (EVAL) at every call.
local keys, argv, blob

-- FLAGS is an item's flags byte read as its bits, filled as flags are met
-- (flags_of): reading the bits by arithmetic cost Redis 0.3 µs an item.
local FLAGS = {}

local function flags_of(flags)
  local f = {
    force = flags % 2 == 1, shadow = floor(flags / 2) % 2 == 1, count = floor(flags / 4) % 2 == 1,
    giveback = floor(flags / 8) % 2 == 1, holder = floor(flags / 16) % 2 == 1, packed = floor(flags / 32) % 2 == 1,
  }
  FLAGS[flags] = f
  return f
end

-- earlier is the index of an earlier item of the same key in items, so
-- that a key twice in one request sees itself.
local function earlier(items, i)
  for j = i - 1, 1, -1 do
    if items[j].key == items[i].key then return j end
  end
  return nil
end

-- decide_request decides the n items at keys[k...], packed in blob from
-- pos, their holders from argv[h], at now and appends the request's reply
-- to out.
-- The tables a request works in, reused by the next request and, in a
-- function library, the next call (slots 1..n are written before they are
-- read): a table costs Redis about half a microsecond, more than the
-- arithmetic of a decision. outs and ress are the new state and the result
-- of a plain decision of item i (decide's ost and ores): the request
-- stores and answers from them before the next request writes them.
local items, states, loaded, results, scratch, outs, ress = {}, {}, {}, {}, {}, {}, {}

local function decide_request(k, pos, n, h, now, out)
  for i = 1, n do
    local kind, flags, limit, window, burst, cost, origin, age = sunpack(ITEM, blob, pos)
    pos = pos + ITEM_SIZE
    local it = items[i]
    if not it then
      it = {}
      items[i] = it
    end
    it.key, it.kind, it.limit, it.window, it.burst, it.cost, it.origin, it.age = keys[k + i - 1], kind, limit, window, burst, cost, origin, age
    local f = FLAGS[flags] or flags_of(flags)
    it.force, it.shadow, it.count, it.giveback, it.packed = f.force, f.shadow, f.count, f.giveback, f.packed
    it.holder = nil
    if f.holder then
      it.holder, h = argv[h], h + 1
    end
  end

  for i = 1, n do
    local st
    local j = earlier(items, i)
    if j then
      loaded[i] = loaded[j]
      st = states[j]
    else
      scratch[i] = scratch[i] or {}
      loaded[i] = load_state(items[i], scratch[i])
      st = loaded[i]
    end
    if not outs[i] then outs[i], ress[i] = {}, {} end
    states[i], results[i] = decide(st, items[i], now, items[i].cost, items[i].force, items[i].count, items[i].giveback, outs[i], ress[i])
  end

  local vetoed, refunds = false, false
  for i = 1, n do
    local r = results[i]
    if not r.allowed and not items[i].shadow and not items[i].force and not items[i].count then vetoed = true end
    if items[i].giveback then refunds = true end
  end

  if vetoed then
    -- Nothing is taken, but the refunds apply, to the keys as the request
    -- found them (algorithm.DecideAll).
    for i = 1, n do
      local j = earlier(items, i)
      local st = loaded[i]
      if j then st = states[j] end
      if items[i].giveback then
        states[i], results[i] = decide(st, items[i], now, items[i].cost, false, false, true)
      else
        if results[i].allowed then
          local _, r = decide(st, items[i], now, 0, false)
          results[i] = r
        end
        states[i] = st
      end
    end
  end
  if not vetoed or refunds then
    for i = 1, n do
      local last = true
      for j = i + 1, n do
        if items[j].key == items[i].key then last = false end
      end
      if last then store_state(items[i], states[i], results[i].reset) end
    end
  end

  out[#out + 1] = spack('<d', now)
  for i = 1, n do
    local r = results[i]
    out[#out + 1] = spack(REPLY, r.allowed and 1 or 0, r.remaining, r.retry, r.reset, r.left or r.remaining)
  end
end

-- holders is how many of the n items packed from pos carry a holder.
local function holders(pos, n)
  local c = 0
  for i = 0, n - 1 do
    local flags = byte(blob, pos + i * ITEM_SIZE + 1)
    if (FLAGS[flags] or flags_of(flags)).holder then c = c + 1 end
  end
  return c
end

-- driver: each call runs what follows.
bind()
keys, argv, blob = KEYS, ARGV, ARGV[1]

-- Load every string state of the call with one MGET: the kinds are read
-- straight from the blob, without unpacking the items.
local strings, pos, k = {}, 1, 1
while pos <= #blob do
  local _, n = sunpack(HEADER, blob, pos)
  pos = pos + HEADER_SIZE
  for i = 0, n - 1 do
    local a = ALGORITHMS[byte(blob, pos)]
    if a and a.fields then strings[#strings + 1] = KEYS[k + i] end
    pos = pos + ITEM_SIZE
  end
  k = k + n
end
prefetch(strings)

local clock
local out = {}
local h = 2
pos, k = 1, 1
while pos <= #blob do
  local now, n = sunpack(HEADER, blob, pos)
  pos = pos + HEADER_SIZE
  if now < 0 then
    if not clock then
      local t = call('TIME')
      clock = tonum(t[1]) * 1000000 + tonum(t[2])
    end
    now = clock
  end
  -- A request that fails (a key of another type, say) fails alone: its
  -- reply is now = -1 and zeros, the others of the call stand. What it
  -- stored before failing stays, as it would in a call of its own.
  local mark = #out
  local ok, err = pcall(decide_request, k, pos, n, h, now, out)
  if not ok then
    redis.log(redis.LOG_WARNING, 'sluice decide: ' .. tostring(err))
    for i = #out, mark + 1, -1 do out[i] = nil end
    out[#out + 1] = spack('<d', -1)
    for _ = 1, n do out[#out + 1] = spack(REPLY, 0, 0, 0, 0, 0) end
  end
  k, pos, h = k + n, pos + n * ITEM_SIZE, h + holders(pos, n)
end
return table.concat(out)
