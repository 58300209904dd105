-- sluice: fixed window counter, mirroring pkg/algorithm/fixed_window.go.
-- b is the previous window's count, kept for records that arrive late; a
-- state stored before it was kept has none, read as a full window (a late
-- record then carries all its hits into the current window, as before).
local fixed_window = { fields = { 't', 'a', 'b' } }

-- at: the state brought to now's window (fixedWindowAt).
local function at(st, p, now)
  local start = window_start(now, p.window, p.origin)
  local count, prev = 0, 0
  if st.exists then
    if st.t >= start then
      start, count, prev = st.t, st.a, st.b or p.limit
    elseif st.t == start - p.window then
      -- the previous window's excess carried into this one
      count, prev = max(0, st.a - p.limit), min(st.a, p.limit)
    end
  end
  return start, count, prev
end

function fixed_window.decide(st, p, now, cost, force)
  local start, count, prev = at(st, p, now)
  local n = need(cost)
  local allowed = count + n <= p.limit
  -- debt: limit past the limit (algorithm.maxDebt; see algorithm.Decide);
  -- count's refused hits only up to the limit, never carried
  if allowed or force == true then
    count = max(count, min(count + cost, 2 * p.limit))
  elseif force == 'count' then
    count = max(count, min(count + cost, p.limit))
  end
  local left = start + p.window - now
  local r = { allowed = allowed, remaining = max(0, p.limit - count), retry = 0, reset = 0 }
  r.left = r.remaining
  local carry = max(0, count - p.limit) -- what the next window starts with
  if not allowed then
    r.retry = left
    if carry + n > p.limit then r.retry = left + p.window end
  end
  if count > 0 then
    r.reset = left
    if carry > 0 then r.reset = left + p.window end
  end
  return { exists = true, t = start, a = count, b = prev }, r
end

-- fixedWindowRecord: in the window that held at; the previous window takes
-- what fits below its limit and carries the rest into the current one.
function fixed_window.record(st, p, now, t, cost)
  local start, count, prev = at(st, p, now)
  if window_start(t, p.window, p.origin) >= start then
    return (fixed_window.decide(st, p, now, cost, true))
  end
  local over = min(cost, max(0, prev + cost - p.limit))
  prev = min(prev + cost, p.limit)
  count = max(count, min(count + over, 2 * p.limit))
  return { exists = true, t = start, a = count, b = prev }
end

-- fixedWindowKeep: a window's state is kept through the next window.
function fixed_window.keep(p, reset)
  if reset > 0 then return reset + p.window end
  return reset
end

-- fixedWindowGiveBack: the current window's count down by the cost, to 0
-- at most; a closed window's is left as it is.
function fixed_window.give_back(st, p, now, cost)
  if not st.exists then return st, 0 end
  local start, count, prev = at(st, p, now)
  return { exists = true, t = start, a = max(0, count - cost), b = prev }, min(count, cost)
end

-- refund: only the refund script includes what follows.

-- fixedWindowRefund: off the window the take counted it in, if still the key's.
function fixed_window.refund(st, p, taken, cost)
  if st.t == window_start(taken, p.window, p.origin) then st.a = max(0, st.a - cost) end
  return st
end
