-- sluice: exact sliding log, mirroring pkg/algorithm/log.go slidingLog.
-- The log is a Redis list of runs, oldest first, each "t n total": n units
-- accepted at time t, total the running sum of units up to and including
-- them (see algorithm.Run). A decision reads the runs it needs with LINDEX
-- and binary search, never the whole list, and adds at most one run, so its
-- cost grows with log(runs), not with the limit or the cost.
--
-- In a script the state is the stored list (len runs, the live ones from
-- index first) plus what this request changed: grow, the stored newest run
-- grown (or, by a refund, shrunk) by it, new, the runs it appended (one per
-- time: a record placed in the past can append at another time than the
-- request's now), and cut, set when a refund dropped the stored runs past
-- len.
-- A key decided twice in one request sees both, and is stored with one
-- LTRIM, an LSET and an RPUSH per new run.

local sliding_log = {}

local SMALL_LOG = 32 -- logs up to this many runs are read whole, with one LRANGE

local function parse_run(v)
  local t, n, total = string.match(v, '^(%S+) (%S+) (%S+)$')
  if not t then return nil end
  return { t = tonumber(t), n = tonumber(n), total = tonumber(total) }
end

local function log_end(st)
  return st.len + #st.new
end

local function run_at(st, i) -- i-th run, 1-based
  if i > st.len then return st.new[i - st.len] end
  if st.grow and i == st.len then return st.grow end
  local r = st.runs[i]
  if not r then
    r = parse_run(redis.call('LINDEX', st.key, i - 1))
    st.runs[i] = r
  end
  return r
end

-- search returns the first index in [lo, hi] whose run satisfies ok, or
-- hi + 1; ok must be false up to some index and true from there on.
local function search(st, lo, hi, ok)
  hi = hi + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ok(run_at(st, mid)) then hi = mid else lo = mid + 1 end
  end
  return lo
end

local function log_units(st)
  local last = log_end(st)
  if last < st.first then return 0 end
  local first = run_at(st, st.first)
  return run_at(st, last).total - (first.total - first.n)
end

function sliding_log.load(item)
  local st = { key = item.key, len = redis.call('LLEN', item.key), first = 1, runs = {}, grow = nil, new = {} }
  if st.len > 0 and not parse_run(redis.call('LINDEX', item.key, -1)) then
    -- A log in the format before runs (one time per entry): dropped, it
    -- would have expired within one window.
    redis.call('DEL', item.key)
    st.len = 0
  end
  if st.len > 0 and st.len <= SMALL_LOG then
    local raw = redis.call('LRANGE', item.key, 0, -1)
    for i = 1, #raw do st.runs[i] = parse_run(raw[i]) end
  end
  st.exists = st.len > 0
  return st
end

function sliding_log.store(item, st, ttl)
  if st.first > st.len then
    redis.call('DEL', item.key) -- every stored run expired or refunded
  elseif st.first > 1 or st.cut then
    redis.call('LTRIM', item.key, st.first - 1, st.len - 1)
  end
  local function text(r) return num(r.t) .. ' ' .. num(r.n) .. ' ' .. num(r.total) end
  if st.grow and st.first <= st.len then redis.call('LSET', item.key, -1, text(st.grow)) end
  for _, r in ipairs(st.new) do redis.call('RPUSH', item.key, text(r)) end
  redis.call('PEXPIRE', item.key, ttl)
end

-- append_run adds n units at t, the log's newest time or later (appendRun).
local function append_run(st, t, n)
  local last = log_end(st)
  if last >= st.first and run_at(st, last).t == t then
    local r = run_at(st, last)
    local grown = { t = t, n = r.n + n, total = r.total + n }
    if last > st.len then st.new[last - st.len] = grown else st.grow = grown end
    return
  end
  local total = 0
  if last >= st.first then total = run_at(st, last).total end
  st.new[#st.new + 1] = { t = t, n = n, total = total + n }
end

-- copy is a state to change without changing st (states decided from one
-- another share their stored runs, not what a request changed).
local function copy(st)
  local new = {}
  for i, r in ipairs(st.new) do new[i] = r end
  return { key = st.key, len = st.len, first = st.first, runs = st.runs, grow = st.grow, new = new, cut = st.cut }
end

function sliding_log.decide(st, p, now, cost, force)
  local nst = copy(st)
  local last = log_end(nst)
  if last >= nst.first and run_at(nst, last).t > now then now = run_at(nst, last).t end
  nst.first = search(nst, nst.first, last, function(r) return r.t > now - p.window end)
  local count = log_units(nst)
  local n = need(cost)
  local allowed = count + n <= p.limit
  local retry = 0
  if not allowed then
    if n > p.limit or count == 0 then
      retry = p.window
      if count > 0 then retry = run_at(nst, last).t + p.window - now end
    else
      -- The oldest k units must leave the window: wait for the run holding the k-th.
      local k = count + n - p.limit
      local first = run_at(nst, nst.first)
      local base = first.total - first.n
      local j = search(nst, nst.first, last, function(r) return r.total - base >= k end)
      retry = run_at(nst, j).t + p.window - now
    end
  end
  if (allowed or force) and cost > 0 then
    local add = math.min(cost, math.max(0, 2 * p.limit - count)) -- debt cap: see slidingLog
    if add > 0 then
      append_run(nst, now, add)
      count = count + add
    end
  end
  nst.exists = count > 0
  local r = { allowed = allowed, remaining = math.max(0, p.limit - count), retry = retry, reset = 0 }
  r.left = r.remaining
  if count > 0 then r.reset = run_at(nst, log_end(nst)).t + p.window - now end
  return nst, r
end

-- slidingLogRecord: units admitted at `at` placed at their own time, or at
-- the newest run's if later, within the log's cap as a force.
function sliding_log.record(st, p, now, at, cost)
  local nst = copy(st)
  local last = log_end(nst)
  if last >= nst.first and run_at(nst, last).t > now then now = run_at(nst, last).t end
  nst.first = search(nst, nst.first, last, function(r) return r.t > now - p.window end)
  local place = math.max(at, now - p.window + 1)
  if last >= nst.first then place = math.max(place, run_at(nst, last).t) end
  local add = math.min(cost, math.max(0, 2 * p.limit - log_units(nst)))
  if add > 0 then append_run(nst, place, add) end
  nst.exists = log_units(nst) > 0
  return nst
end

-- slidingLogGiveBack: the newest cost units still in the window go, newest
-- first: runs appended by this request, then stored runs, cut from the end.
function sliding_log.give_back(st, p, now, cost)
  local asked = cost
  local nst = copy(st)
  local last = log_end(nst)
  if last >= nst.first and run_at(nst, last).t > now then now = run_at(nst, last).t end
  nst.first = search(nst, nst.first, last, function(r) return r.t > now - p.window end)
  while cost > 0 and log_end(nst) >= nst.first do
    local i = log_end(nst)
    local r = run_at(nst, i)
    if r.n > cost then
      local shrunk = { t = r.t, n = r.n - cost, total = r.total - cost }
      if i > nst.len then nst.new[i - nst.len] = shrunk else nst.grow = shrunk end
      cost = 0
    else
      cost = cost - r.n
      if i > nst.len then
        nst.new[i - nst.len] = nil
      else
        nst.len, nst.grow, nst.cut = nst.len - 1, nil, true
      end
    end
  end
  nst.exists = log_units(nst) > 0
  return nst, asked - cost
end

-- refund: only the refund script includes what follows.

-- slidingLogRefund: the run at taken gives back cost units (and goes when
-- it has none left), and every later run's running total drops by as
-- much. Later runs (other requests' since) are few: the refund follows its
-- take, so the list is walked from its end.
function sliding_log.refund_key(item, taken, cost)
  local len = redis.call('LLEN', item.key)
  local runs, found = {}, nil
  for j = len, 1, -1 do
    local r = parse_run(redis.call('LINDEX', item.key, j - 1))
    if not r or r.t < taken then break end
    runs[j] = r
    if r.t == taken then
      found = j
      break
    end
  end
  if not found then return end
  for j = found, len do
    local r = runs[j]
    r.total = r.total - cost
    if j == found then r.n = r.n - cost end
    local v = ''
    if r.n > 0 then v = num(r.t) .. ' ' .. num(r.n) .. ' ' .. num(r.total) end
    redis.call('LSET', item.key, j - 1, v)
  end
  redis.call('LREM', item.key, 1, '')
end
