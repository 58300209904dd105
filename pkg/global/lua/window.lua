-- sluice: fixed and sliding window counters, mirroring pkg/algorithm/window.go.
local function fixed_window(st, p, now, cost, force)
  local start = window_start(now, p.window)
  local count = 0
  if st.exists and st.t >= start then start, count = st.t, st.a end
  local n = need(cost)
  local allowed = count + n <= p.limit
  if allowed or force then count = math.max(count, math.min(count + cost, 2 * p.limit)) end
  local left = start + p.window - now
  local r = { allowed = allowed, remaining = math.max(0, p.limit - count), retry = 0, reset = 0 }
  if not allowed then r.retry = left end
  if count > 0 then r.reset = left end
  return { exists = true, t = start, a = count, b = 0 }, r
end

local function sliding_window(st, p, now, cost, force)
  local start = window_start(now, p.window)
  local curr, prev = 0, 0
  if st.exists then
    if st.t >= start then
      start, curr, prev = st.t, st.a, st.b
    elseif st.t == start - p.window then
      prev = st.a
    end
  end
  local elapsed = math.max(0, now - start)
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
    local added = math.max(0, math.min(cost, 2 * p.limit - curr))
    curr = curr + added
    estimate = estimate + added
  end
  local r = { allowed = allowed, remaining = floor_non_neg(p.limit - estimate), retry = retry, reset = 0 }
  if curr > 0 then
    r.reset = left + p.window
  elseif prev > 0 then
    r.reset = left
  end
  return { exists = true, t = start, a = curr, b = prev }, r
end
