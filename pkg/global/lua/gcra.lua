-- sluice: GCRA, mirroring pkg/algorithm/gcra.go.
local gcra = { fields = { 'f' } }

function gcra.decide(st, p, now, cost, force)
  local interval = p.window / p.limit
  local tolerance = p.burst * interval
  local tat = now
  if st.exists and st.f > now then tat = st.f end
  local n = need(cost)
  local allow_at = tat + n * interval - tolerance
  local allowed = now >= allow_at
  local retry = 0
  if not allowed then
    if n > p.burst then
      retry = ceil_pos(tat - now)
    else
      retry = ceil_pos(allow_at - now)
    end
  end
  if allowed or force then
    -- debt stops at min(burst, limit) intervals past the tolerance
    -- (algorithm.maxDebt; see algorithm.Decide)
    local most = now + tolerance + min(p.burst, p.limit) * interval
    tat = max(tat, min(tat + cost * interval, most))
  end
  return { exists = true, f = tat },
    { allowed = allowed, remaining = floor_non_neg((tolerance - (tat - now)) / interval),
      left = max(0, (tolerance - (tat - now)) / interval), retry = retry, reset = ceil_pos(tat - now) }
end

-- gcraGiveBack: the arrival time back by the cost, to now at most.
function gcra.give_back(st, p, now, cost)
  if not st.exists or st.f <= now then return st, 0 end
  local interval = p.window / p.limit
  local f = max(now, st.f - cost * interval)
  return { exists = true, f = f }, (st.f - f) / interval
end

-- refund: only the refund script includes what follows.

-- gcraRefund: the theoretical arrival time moves back by what the take added.
function gcra.refund(st, p, taken, cost)
  st.f = st.f - cost * (p.window / p.limit)
  return st
end
