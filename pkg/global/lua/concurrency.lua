-- sluice: concurrency, mirroring pkg/algorithm/concurrency.go. The units
-- held are a sorted set: member a unit's name (algorithm.SlotMember: the
-- holder for its first unit, holder NUL k for its k-th), score the time it
-- was taken (µs), so the oldest come first as in State.Slots. A unit is
-- held for one window at most, its TTL: those scored at or below
-- now - window have expired.
--
-- A decision reads what it needs (ZCARD, a count below the expiry, a
-- rank, members' scores), never the whole set. A give back looks its
-- holder's units up by number, up to the highest number any unit of the
-- set may have: a holder's numbers have gaps (its older units expire
-- first), so only such a bound tells where they end. The set keeps it as
-- one more member, MARK, scored MARK_BASE - bound (below any unit and any
-- expiry), written once a unit is numbered past 1 and dropped with the
-- key; without it the bound is 1. Where the bound is high for the set's
-- size (a holder once took thousands), the give back scans the set
-- instead (ZSCAN MATCH: in Redis 7.0 about a third of a probe's cost a
-- member). The bound, and a take's probes, count the numbers takes gave.
-- A holder holds no NUL (algorithm.Params.Validate), so no name is two
-- holders' units.
--
-- In a script the state is the stored set, read as needed (stored: what
-- was read, shared by the states decided from one load, since the set
-- does not change before the request stores it), and what this request
-- changed: cut (stored units scored at or below it expired), gone (stored
-- units given back, member -> score), new (the units taken, in the order
-- Go appends them, none older than a stored one) and top (their highest
-- number). A key decided twice in one request sees both, and is stored
-- with a ZREMRANGEBYSCORE, a ZREM and a ZADD.

local concurrency = {}

local NO_CUT = -1 / 0 -- -inf: no cut (no library is reachable while a function library loads)

-- MARK can name no unit: a holder is never empty. MARK_BASE is -2^52,
-- below any expiry: now - window ≥ -algorithm.MaxWindow.
local MARK, MARK_BASE = '', -4503599627370496

function concurrency.load(item)
  local card = call('ZCARD', item.key)
  return { key = item.key, stored = { card = card, scores = {}, below = {} },
    cut = NO_CUT, gone = {}, new = {}, is_new = {}, top = 0 }
end

-- in_chunks runs cmd on key with args, a thousand at a time: unpack is
-- bounded by the Lua stack, and a key holds up to 2 × 10,000 units.
local function in_chunks(cmd, key, args)
  local i = 1
  while i <= #args do
    local j = min(i + 999, #args)
    call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- bound is the highest number a stored unit may have.
local function bound(st)
  local b = st.stored.bound
  if not b then
    local s = st.stored.card > 0 and call('ZSCORE', st.key, MARK)
    b = s and MARK_BASE - tonum(s) or 1
    st.stored.bound = b
  end
  return b
end

function concurrency.store(item, st, ttl)
  if st.cut > NO_CUT then call('ZREMRANGEBYSCORE', item.key, '(' .. num(MARK_BASE), num(st.cut)) end
  if st.top > 1 and st.top > bound(st) then call('ZADD', item.key, num(MARK_BASE - st.top), MARK) end
  local gone, add = {}, {}
  for m in pairs(st.gone) do gone[#gone + 1] = m end
  in_chunks('ZREM', item.key, gone) -- before the ZADD: a unit given back may be taken again
  for _, u in ipairs(st.new) do
    add[#add + 1] = num(u.t)
    add[#add + 1] = u.m
  end
  in_chunks('ZADD', item.key, add) -- pairs: a chunk holds an even number
  call('PEXPIRE', item.key, ttl)
end

-- member is holder's k-th unit (algorithm.SlotMember).
local function member(holder, k)
  if k == 1 then return holder end
  return holder .. '\0' .. format('%d', k)
end

-- unit is the number of holder's unit m, or nil when m is not one of
-- holder's (memberUnit: m is the holder, or the holder, NUL and a number
-- above 1 that strconv.ParseInt reads: a sign, digits, within int64).
local INT64_MAX = '9223372036854775807'

local function unit(m, holder)
  if m == holder then return 1 end
  local n = #holder
  if #m <= n + 1 or sub(m, 1, n) ~= holder or byte(m, n + 1) ~= 0 then return nil end
  local sign, digits = string.match(m, '^([+-]?)0*(%d+)$', n + 2)
  if not digits or sign == '-' or #digits > 19 or (#digits == 19 and digits > INT64_MAX) then return nil end
  local k = tonum(digits)
  if k <= 1 then return nil end
  return k
end

-- copy is a state to change without changing st.
local function copy(st)
  local gone, new, is_new = {}, {}, {}
  for m, t in pairs(st.gone) do gone[m] = t end
  for i, u in ipairs(st.new) do
    new[i] = u
    is_new[u.m] = true
  end
  return { key = st.key, stored = st.stored, cut = st.cut, gone = gone, new = new, is_new = is_new, top = st.top }
end

-- score is m's score in the stored set, or false.
local function score(st, m)
  local s = st.stored.scores[m]
  if s == nil then
    s = st.stored.card > 0 and call('ZSCORE', st.key, m)
    s = s and tonum(s)
    st.stored.scores[m] = s
  end
  return s
end

local function held(st, m)
  if st.is_new[m] then return true end
  local s = score(st, m)
  return s and s > st.cut and not st.gone[m]
end

-- below is how many stored members are at or below the cut: the expired
-- units and MARK.
local function below(st)
  if st.cut == NO_CUT then return 0 end
  local n = st.stored.below[st.cut]
  if not n then
    n = call('ZCOUNT', st.key, '-inf', num(st.cut))
    st.stored.below[st.cut] = n
  end
  return n
end

local function gone_count(st)
  local n = 0
  for _, t in pairs(st.gone) do
    if t > st.cut then n = n + 1 end
  end
  return n
end

local function stored_held(st)
  return st.stored.card - below(st) - gone_count(st)
end

local function count(st)
  return stored_held(st) + #st.new
end

-- newest is the time of the newest unit held, or nil.
local function newest(st)
  if #st.new > 0 then return st.new[#st.new].t end
  -- The newest stored unit not given back: among the newest #gone + 1.
  local n = 0
  for _ in pairs(st.gone) do n = n + 1 end
  local r = call('ZREVRANGE', st.key, 0, n, 'WITHSCORES')
  for i = 1, #r, 2 do
    local t = tonum(r[i + 1])
    if t <= st.cut then return nil end
    if not st.gone[r[i]] then return t end
  end
  return nil
end

-- nth is the time of the j-th oldest unit held (1 ≤ j ≤ count).
local function nth(st, j)
  local stored = stored_held(st)
  if j > stored then return st.new[j - stored].t end
  local first, n = below(st), gone_count(st)
  if n == 0 then return tonum(call('ZRANGE', st.key, first + j - 1, first + j - 1, 'WITHSCORES')[2]) end
  -- Units given back in this request (rare with a refusal) are skipped:
  -- the j-th held is within the first j + n past the cut.
  local r = call('ZRANGE', st.key, first, first + j - 1 + n, 'WITHSCORES')
  for i = 1, #r, 2 do
    if not st.gone[r[i]] then
      j = j - 1
      if j == 0 then return tonum(r[i + 1]) end
    end
  end
end

-- live is a copy of st without the units whose TTL has passed at now,
-- and now, moved to the newest unit's time if the clock went back
-- (liveSlots). Units this request took are never past the cut: its
-- decisions share its now, at which they were taken, or later.
local function live(st, p, now)
  local nst = copy(st)
  local t = newest(nst)
  if t and t > now then now = t end
  nst.cut = max(nst.cut, now - p.window)
  return nst, now
end

-- take adds n units of holder at now, named by the first unit numbers
-- the holder does not hold (takeSlots).
local function take(st, holder, now, n)
  local k = 1
  while n > 0 do
    local m = member(holder, k)
    if not held(st, m) then
      st.new[#st.new + 1] = { m = m, t = now }
      st.is_new[m] = true
      st.top = max(st.top, k)
      n = n - 1
    end
    k = k + 1
  end
end

function concurrency.decide(st, p, now, cost, force)
  local nst
  nst, now = live(st, p, now)
  local n = need(cost)
  local held_now = count(nst)
  local allowed = held_now + n <= p.limit
  local retry = 0
  if not allowed then
    if n > p.limit then
      retry = p.window
    else
      -- The oldest k units must expire: wait for the k-th.
      retry = nth(nst, held_now + n - p.limit) + p.window - now
    end
  end
  if (allowed or force) and cost > 0 then
    take(nst, p.holder, now, min(cost, 2 * p.limit - held_now)) -- debt cap: algorithm.maxDebt
    held_now = count(nst)
  end
  local r = { allowed = allowed, remaining = max(0, p.limit - held_now), retry = retry, reset = 0 }
  r.left = r.remaining
  if held_now > 0 then r.reset = newest(nst) + p.window - now end
  nst.exists = held_now > 0
  return nst, r
end

-- stored_units are holder's stored units still held, newest first: Go
-- walks its slots from the newest, and the units one holder took at one
-- time were appended in the order of their numbers (a take numbers them
-- upwards), so among equal times the highest number goes first. (A
-- refund of an older take between two takes of one holder at one instant
-- appends them out of that order; the units given back then differ in
-- name only, not in holder or time, so no decision differs.)
local function stored_units(st, holder)
  local units = {}
  local function add(m, t, k)
    if t > st.cut and not st.gone[m] then units[#units + 1] = { m = m, t = t, k = k } end
  end
  if 3 * bound(st) < st.stored.card then
    for k = 1, bound(st) do
      local m = member(holder, k)
      local t = score(st, m)
      if t then add(m, t, k) end
    end
  else
    local seen, cursor = {}, '0'
    local pattern = string.gsub(holder, '[%*%?%[%]\\]', '\\%0') .. '*'
    repeat
      local r = call('ZSCAN', st.key, cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = r[1]
      for i = 1, #r[2], 2 do
        local m = r[2][i]
        local k = unit(m, holder)
        if k and not seen[m] then -- ZSCAN may return a member twice
          seen[m] = true
          add(m, tonum(r[2][i + 1]), k)
        end
      end
    until cursor == '0'
  end
  table.sort(units, function(a, b) return a.t > b.t or (a.t == b.t and a.k > b.k) end)
  return units
end

-- concurrencyGiveBack: up to cost of the holder's units, the newest
-- first: those this request took, then the stored ones.
function concurrency.give_back(st, p, now, cost)
  local asked = cost
  local nst = live(st, p, now)
  for i = #nst.new, 1, -1 do
    if cost == 0 then break end
    local m = nst.new[i].m
    if unit(m, p.holder) then
      table.remove(nst.new, i)
      nst.is_new[m] = nil
      cost = cost - 1
    end
  end
  if cost > 0 then
    local units = stored_units(nst, p.holder)
    local n = min(cost, #units)
    for i = 1, n do nst.gone[units[i].m] = units[i].t end
    cost = cost - n
  end
  nst.exists = count(nst) > 0
  return nst, asked - cost
end

-- refund: only the refund script includes what follows.

-- concurrencyRefund: up to cost of the holder's units taken at taken, the
-- highest numbers first (as stored_units orders equal times), leaving the
-- key's expiry as it was.
function concurrency.refund_key(item, taken, cost)
  local units = {}
  for _, m in ipairs(call('ZRANGEBYSCORE', item.key, num(taken), num(taken))) do
    local k = unit(m, item.holder)
    if k then units[#units + 1] = { m = m, k = k } end
  end
  table.sort(units, function(a, b) return a.k > b.k end)
  local drop = {}
  for i = 1, min(cost, #units) do drop[i] = units[i].m end
  in_chunks('ZREM', item.key, drop)
end
