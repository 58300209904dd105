-- sluice: token bucket, mirroring pkg/algorithm/token_bucket.go.
local token_bucket = { fields = { 'f', 't' } }

-- ost and ores, when given, are the tables the new state and the result
-- are written into (decide: a table costs Redis more than the arithmetic).
function token_bucket.decide(st, p, now, cost, force, ost, ores)
  local rate = p.limit / p.window
  local capacity = p.burst
  local tokens, updated = capacity, now
  if st.exists then tokens, updated = st.f, st.t end
  if now > updated then
    tokens = min(capacity, tokens + (now - updated) * rate)
    updated = now
  end
  local n = need(cost)
  local allowed = tokens + EPSILON >= n
  local retry = 0
  if not allowed then
    if n > capacity then
      retry = ceil_pos((capacity - tokens) / rate)
    else
      retry = ceil_pos((n - tokens) / rate)
    end
  end
  if allowed or force then
    -- debt stops at min(burst, limit) below empty, one window's refill
    -- (algorithm.maxDebt; see algorithm.Decide)
    tokens = min(tokens, max(tokens - cost, -min(capacity, p.limit)))
  end
  local reset = ceil_pos((capacity - tokens) / rate)
  if ost then
    ost.exists, ost.f, ost.t = true, tokens, updated
    ores.allowed, ores.remaining, ores.left, ores.retry, ores.reset = allowed, floor_non_neg(tokens), max(0, tokens), retry, reset
    return ost, ores
  end
  return { exists = true, f = tokens, t = updated },
    { allowed = allowed, remaining = floor_non_neg(tokens), left = max(0, tokens), retry = retry, reset = reset }
end

-- tokenBucketGiveBack: refilled to now, then the cost back, up to the burst.
function token_bucket.give_back(st, p, now, cost)
  if not st.exists then return st, 0 end
  local nst = token_bucket.decide(st, p, now, 0, false)
  local old = nst.f
  nst.f = min(p.burst, nst.f + cost)
  return nst, max(0, nst.f - old)
end

-- refund: only the refund script includes what follows.

-- tokenBucketRefund: the next decision caps the bucket at its burst again.
function token_bucket.refund(st, p, taken, cost)
  st.f = st.f + cost
  return st
end
