-- sluice: exact sliding log, mirroring pkg/algorithm/sliding_log.go slidingLog.
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
--
-- The log's debt (what a force or a late record added past a full log,
-- see algorithm.slidingLog) is stored as a last run at the time of the run
-- before it (algorithm.splitDebt): debt the count of its units, len the
-- runs before it, stored_debt set when the list holds it past len. An
-- older server reads it as units accepted at that time.

local sliding_log = {}

local SMALL_LOG = 32 -- logs up to this many runs are read whole, with one LRANGE

local function parse_run(v)
  local t, n, total = string.match(v, '^(%S+) (%S+) (%S+)$')
  if not t then return nil end
  return { t = tonum(t), n = tonum(n), total = tonum(total) }
end

local function log_end(st)
  return st.len + #st.new
end

local function run_at(st, i) -- i-th run, 1-based
  if i > st.len then return st.new[i - st.len] end
  if st.grow and i == st.len then return st.grow end
  local r = st.runs[i]
  if not r then
    r = parse_run(call('LINDEX', st.key, i - 1))
    st.runs[i] = r
  end
  return r
end

-- search returns the first index in [lo, hi] whose run satisfies ok, or
-- hi + 1; ok must be false up to some index and true from there on.
local function search(st, lo, hi, ok)
  hi = hi + 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
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
  local st = { key = item.key, len = call('LLEN', item.key), first = 1, runs = {}, grow = nil, new = {}, debt = 0 }
  if st.len > 0 and not parse_run(call('LINDEX', item.key, -1)) then
    -- A log in the format before runs (one time per entry): dropped, it
    -- would have expired within one window.
    call('DEL', item.key)
    st.len = 0
  end
  if st.len > 0 and st.len <= SMALL_LOG then
    local raw = call('LRANGE', item.key, 0, -1)
    for i = 1, #raw do st.runs[i] = parse_run(raw[i]) end
  end
  if st.len >= 2 and run_at(st, st.len).t == run_at(st, st.len - 1).t then
    st.debt, st.len, st.stored_debt = run_at(st, st.len).n, st.len - 1, true
  end
  st.exists = st.len > 0
  return st
end

function sliding_log.store(item, st, ttl)
  if st.first > st.len then
    call('DEL', item.key) -- every stored run expired or refunded
  elseif st.first > 1 or st.cut or st.stored_debt then
    call('LTRIM', item.key, st.first - 1, st.len - 1)
  end
  local function text(r) return num(r.t) .. ' ' .. num(r.n) .. ' ' .. num(r.total) end
  if st.grow and st.first <= st.len then call('LSET', item.key, -1, text(st.grow)) end
  for _, r in ipairs(st.new) do call('RPUSH', item.key, text(r)) end
  local last = log_end(st)
  if st.debt > 0 and last >= st.first then
    local r = run_at(st, last)
    call('RPUSH', item.key, text({ t = r.t, n = st.debt, total = r.total + st.debt }))
  end
  call('PEXPIRE', item.key, ttl)
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
  return { key = st.key, len = st.len, first = st.first, runs = st.runs, grow = st.grow, new = new, cut = st.cut,
    debt = st.debt, stored_debt = st.stored_debt }
end

-- unit_run is the index of the run holding the log's k-th oldest unit
-- (unitRun).
local function unit_run(st, k)
  local first = run_at(st, st.first)
  local base = first.total - first.n
  return search(st, st.first, log_end(st), function(r) return r.total - base >= k end)
end

-- slide drops the runs that left the window at now and moves as much of
-- the debt as their leaving makes room for into the log (algorithm.slide).
local function slide(st, p, now)
  local last, old = log_end(st), st.first
  st.first = search(st, st.first, last, function(r) return r.t > now - p.window end)
  if st.debt == 0 or st.first == old then return end
  local o = run_at(st, old)
  local base = o.total - o.n
  local excess = max(0, run_at(st, last).total - base - p.limit)
  local c = min(st.debt, run_at(st, st.first - 1).total - base - excess)
  if c <= 0 then return end
  local j = search(st, old, st.first - 1, function(r) return r.total - base >= excess + c end)
  local at = run_at(st, j).t + p.window
  if last >= st.first then at = max(at, run_at(st, last).t) end
  if at > now - p.window then append_run(st, at, c) end
  st.debt = st.debt - c
end

-- advance takes now to the newest run's time if the clock went back (a
-- log judges at its newest hit) and slides st to it; it returns that now
-- (logAt).
local function advance(st, p, now)
  local last = log_end(st)
  if last >= st.first and run_at(st, last).t > now then now = run_at(st, last).t end
  slide(st, p, now)
  return now
end

-- add adds cost units at t, the log's newest time or later: what fits
-- below the limit to the log, the rest to its debt, within twice the
-- limit (logAdd).
local function add(st, p, t, cost)
  local count = log_units(st)
  local fit = min(cost, max(0, p.limit - count - st.debt))
  if fit > 0 then
    append_run(st, t, fit)
    count, cost = count + fit, cost - fit
  end
  if cost > 0 then st.debt = st.debt + min(cost, max(0, 2 * p.limit - count - st.debt)) end
end

-- excess_debt_run is the run holding the last unit the debt replaces.
local function excess_debt_run(st, p)
  return run_at(st, unit_run(st, max(0, log_units(st) - p.limit) + st.debt))
end

-- wait is how long a refused request of n units waits (logWait).
local function wait(st, p, now, n)
  local count = log_units(st)
  if n > p.limit or count == 0 then
    if count == 0 then return p.window end
    return run_at(st, log_end(st)).t + p.window - now
  end
  local k = count + st.debt + n - p.limit
  if k <= count then return run_at(st, unit_run(st, k)).t + p.window - now end
  return excess_debt_run(st, p).t + 2 * p.window - now
end

-- result is the answer of a decision leaving st at now (logResult).
local function result(st, p, now, allowed, retry)
  local count = log_units(st)
  local r = { allowed = allowed, remaining = max(0, p.limit - count - st.debt), retry = retry, reset = 0 }
  r.left = r.remaining
  if st.debt > 0 then
    r.reset = excess_debt_run(st, p).t + 2 * p.window - now
  elseif count > 0 then
    r.reset = run_at(st, log_end(st)).t + p.window - now
  end
  return r
end

function sliding_log.decide(st, p, now, cost, force)
  local nst = copy(st)
  now = advance(nst, p, now)
  local n = need(cost)
  local allowed = log_units(nst) + nst.debt + n <= p.limit
  local retry = 0
  if not allowed then retry = wait(nst, p, now, n) end
  if cost > 0 and (allowed or force == true) then
    add(nst, p, now, cost)
  elseif cost > 0 and force == 'count' then
    -- count's refused hits: at now within the cap, never as debt
    local fit = min(cost, max(0, 2 * p.limit - log_units(nst) - nst.debt))
    if fit > 0 then append_run(nst, now, fit) end
  end
  nst.exists = log_units(nst) > 0
  return nst, result(nst, p, now, allowed, retry)
end

-- slidingLogRecord: units admitted at `at` placed at their own time, or at
-- the newest run's if later: what fits below the limit, the rest as debt.
function sliding_log.record(st, p, now, at, cost)
  local nst = copy(st)
  now = advance(nst, p, now)
  local place = max(at, now - p.window + 1)
  local last = log_end(nst)
  if last >= nst.first then place = max(place, run_at(nst, last).t) end
  add(nst, p, place, cost)
  nst.exists = log_units(nst) > 0
  return nst
end

-- slidingLogGiveBack: the debt first, then the newest cost units still in
-- the window, newest first: runs appended by this request, then stored
-- runs, cut from the end.
function sliding_log.give_back(st, p, now, cost)
  local asked = cost
  local nst = copy(st)
  now = advance(nst, p, now)
  local given = min(cost, nst.debt)
  nst.debt, cost = nst.debt - given, cost - given
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
  local len = call('LLEN', item.key)
  if len >= 2 then
    -- The debt gives back first (slidingLogRefund).
    local d, before = parse_run(call('LINDEX', item.key, -1)), parse_run(call('LINDEX', item.key, -2))
    if d and before and d.t == before.t then
      local given = min(cost, d.n)
      if given == d.n then
        call('RPOP', item.key)
        len = len - 1
      else
        call('LSET', item.key, -1, num(d.t) .. ' ' .. num(d.n - given) .. ' ' .. num(d.total - given))
      end
      cost = cost - given
      if cost == 0 then return end
    end
  end
  local runs, found = {}, nil
  for j = len, 1, -1 do
    local r = parse_run(call('LINDEX', item.key, j - 1))
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
    call('LSET', item.key, j - 1, v)
  end
  call('LREM', item.key, 1, '')
end
