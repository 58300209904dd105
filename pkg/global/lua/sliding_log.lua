-- sluice: exact sliding log, mirroring pkg/algorithm/log.go slidingLog.
-- The log is a Redis list of hit times, oldest first. In a script the state
-- is the list as loaded (base), the index of its first live entry (first),
-- and how many hits at time addv this request appended (nadd), so a key
-- decided twice in one request is stored with one LTRIM and one RPUSH.

local function log_len(st)
  return #st.base - st.first + 1 + st.nadd
end

local function log_at(st, k) -- k-th live entry, 1-based
  local live = #st.base - st.first + 1
  if k <= live then return st.base[st.first + k - 1] end
  return st.addv
end

load_log = function(item)
  local raw = redis.call('LRANGE', item.key, 0, -1)
  local base = {}
  for i = 1, #raw do base[i] = tonumber(raw[i]) end
  return { exists = #base > 0, base = base, first = 1, nadd = 0, addv = 0 }
end

store_log = function(item, st, ttl)
  if st.first > 1 then redis.call('LTRIM', item.key, st.first - 1, -1) end
  local v = num(st.addv)
  local left = st.nadd
  while left > 0 do -- in chunks: unpack is bounded by the Lua stack
    local chunk = {}
    for i = 1, math.min(left, 1000) do chunk[i] = v end
    redis.call('RPUSH', item.key, unpack(chunk))
    left = left - #chunk
  end
  redis.call('PEXPIRE', item.key, ttl)
end

local function sliding_log(st, p, now, cost, force)
  local count = log_len(st)
  if count > 0 and log_at(st, count) > now then now = log_at(st, count) end
  local first = st.first
  local nst = { exists = st.exists, base = st.base, first = first, nadd = st.nadd, addv = st.addv }
  while log_len(nst) > 0 and log_at(nst, 1) <= now - p.window do
    if nst.first <= #nst.base then nst.first = nst.first + 1 else nst.nadd = nst.nadd - 1 end
  end
  count = log_len(nst)
  local n = need(cost)
  local allowed = count + n <= p.limit
  local retry = 0
  if not allowed then
    if n > p.limit or count == 0 then
      retry = p.window
      if count > 0 then retry = log_at(nst, count) + p.window - now end
    else
      retry = log_at(nst, count + n - p.limit) + p.window - now
    end
  end
  if (allowed or force) and cost > 0 then
    if nst.nadd > 0 and nst.addv ~= now then
      -- Appends at two different times within one request cannot happen:
      -- now is the same for every item, only raised to the newest hit.
      error('sliding_log: two append times in one request')
    end
    local add = math.min(cost, p.limit) -- see slidingLog: bounded, same answers
    nst.nadd = nst.nadd + add
    nst.addv = now
    count = count + add
  end
  nst.exists = count > 0
  local r = { allowed = allowed, remaining = math.max(0, p.limit - count), retry = retry, reset = 0 }
  if count > 0 then r.reset = log_at(nst, count) + p.window - now end
  return nst, r
end
