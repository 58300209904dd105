-- sluice: fixed window counter, mirroring pkg/algorithm/fixed_window.go.
local fixed_window = { fields = { 't', 'a' } }

function fixed_window.decide(st, p, now, cost, force)
  local start = window_start(now, p.window, p.origin)
  local count = 0
  if st.exists and st.t >= start then start, count = st.t, st.a end
  local n = need(cost)
  local allowed = count + n <= p.limit
  -- debt: limit past the limit (algorithm.maxDebt; see algorithm.Decide)
  if allowed or force then count = math.max(count, math.min(count + cost, 2 * p.limit)) end
  local left = start + p.window - now
  local r = { allowed = allowed, remaining = math.max(0, p.limit - count), retry = 0, reset = 0 }
  if not allowed then r.retry = left end
  if count > 0 then r.reset = left end
  return { exists = true, t = start, a = count, b = 0 }, r
end

-- refund: only the refund script includes what follows.

-- fixedWindowRefund: off the window the take counted it in, if still the key's.
function fixed_window.refund(st, p, taken, cost)
  if st.t == window_start(taken, p.window, p.origin) then st.a = math.max(0, st.a - cost) end
  return st
end
