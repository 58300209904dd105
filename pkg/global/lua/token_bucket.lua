-- sluice: token bucket, mirroring pkg/algorithm/bucket.go tokenBucket.
local function token_bucket(st, p, now, cost, force)
  local rate = p.limit / p.window
  local capacity = p.burst
  local tokens, updated = capacity, now
  if st.exists then tokens, updated = st.f, st.t end
  if now > updated then
    tokens = math.min(capacity, tokens + (now - updated) * rate)
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
    -- debt stops at one bucket below empty (see algorithm.Decide)
    tokens = math.min(tokens, math.max(tokens - cost, -capacity))
  end
  local reset = ceil_pos((capacity - tokens) / rate)
  return { exists = true, f = tokens, t = updated },
    { allowed = allowed, remaining = floor_non_neg(tokens), retry = retry, reset = reset }
end

-- gcra, mirroring pkg/algorithm/bucket.go gcra.
local function gcra(st, p, now, cost, force)
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
    tat = math.max(tat, math.min(tat + cost * interval, now + 2 * tolerance))
  end
  return { exists = true, f = tat },
    { allowed = allowed, remaining = floor_non_neg((tolerance - (tat - now)) / interval),
      retry = retry, reset = ceil_pos(tat - now) }
end
