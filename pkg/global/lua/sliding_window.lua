-- sluice: sliding window counter, mirroring pkg/algorithm/sliding_window.go.
local sliding_window = { fields = { 't', 'a', 'b' } }

function sliding_window.decide(st, p, now, cost, force)
  local start = window_start(now, p.window, p.origin)
  local curr, prev = 0, 0
  if st.exists then
    if st.t >= start then
      start, curr, prev = st.t, st.a, st.b
    elseif st.t == start - p.window then
      prev = st.a
    end
  end
  local elapsed = max(0, now - start)
  local left = start + p.window - now
  local w = p.window
  local estimate = prev * (p.window - elapsed) / w + curr
  local n = need(cost)
  local allowed = estimate + n <= p.limit
  local retry = 0
  if not allowed then
    local room = p.limit - n - curr
    if n > p.limit then
      retry = left + p.window
    elseif room >= 0 then
      retry = ceil_pos(left - room * w / prev)
    else
      retry = left + ceil_pos(w - (p.limit - n) * w / curr)
    end
  end
  if allowed or force then
    -- debt: the current window holds at most limit (see algorithm.Decide)
    local added = max(0, min(cost, p.limit - curr))
    curr = curr + added
    estimate = estimate + added
  end
  local r = { allowed = allowed, remaining = floor_non_neg(p.limit - estimate), left = max(0, p.limit - estimate), retry = retry, reset = 0 }
  if curr > 0 then
    r.reset = left + p.window
  elseif prev > 0 then
    r.reset = left
  end
  return { exists = true, t = start, a = curr, b = prev }, r
end

-- slidingWindowRecord: in the window that held t; the previous window takes
-- what fits below its limit and carries the rest into the current one.
function sliding_window.record(st, p, now, t, cost)
  local start = window_start(now, p.window, p.origin)
  if window_start(t, p.window, p.origin) >= start then
    return (sliding_window.decide(st, p, now, cost, true))
  end
  local curr, prev = 0, 0
  if st.exists then
    if st.t >= start then
      start, curr, prev = st.t, st.a, st.b
    elseif st.t == start - p.window then
      prev = st.a
    end
  end
  local over = min(cost, max(0, prev + cost - p.limit))
  prev = max(prev, min(prev + cost, p.limit))
  curr = curr + max(0, min(over, p.limit - curr))
  return { exists = true, t = start, a = curr, b = prev }
end

-- slidingWindowGiveBack: the current window's count down by the cost, to 0
-- at most; the previous window's is left as it is.
function sliding_window.give_back(st, p, now, cost)
  if not st.exists then return st, 0 end
  local start = window_start(now, p.window, p.origin)
  local curr, prev = 0, 0
  if st.t >= start then
    start, curr, prev = st.t, st.a, st.b
  elseif st.t == start - p.window then
    prev = st.a
  end
  return { exists = true, t = start, a = max(0, curr - cost), b = prev }, min(curr, cost)
end

-- refund: only the refund script includes what follows.

-- slidingWindowRefund: off the current window, or the previous one if a
-- window has turned since the take.
function sliding_window.refund(st, p, taken, cost)
  local start = window_start(taken, p.window, p.origin)
  if st.t == start then
    st.a = max(0, st.a - cost)
  elseif st.t == start + p.window then
    st.b = max(0, st.b - cost)
  end
  return st
end
