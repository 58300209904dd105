-- sluice: decide the limits of one or more requests, each atomically and
-- all or nothing, one after the other as if each were its own call.
-- Mirrors pkg/algorithm (DecideAll and the algorithms) line for line;
-- the Go differential tests hold the two to the same results.
--
-- KEYS      the items' state keys, request after request
-- ARGV[1]   the number of requests R; then per request:
--   now     in µs, or "" to read the store's clock (production; read once
--           per call, so the requests of one call share an instant)
--   n       its number of items, then per item six values:
--           kind, limit, window µs, burst, cost, flags
--           kind: pkg/algorithm.Kind (the ALGORITHMS table)
--           flags: 1 force (consume even when it does not fit), 2 shadow
-- Returns, per request: now, then per item: allowed (0/1), remaining,
-- retry µs, reset µs; a request whose decision failed has now = -1 (the
-- error is in Redis's log).

-- decide_request decides the n items at KEYS[k...], ARGV[a...] at now and
-- appends the request's reply to out.
local function decide_request(k, a, n, now, out)
  local items, states, loaded, results = {}, {}, {}, {}
  for i = 1, n do
    local b = a + (i - 1) * 6
    local flags = tonumber(ARGV[b + 5])
    items[i] = {
      key = KEYS[k + i - 1],
      kind = tonumber(ARGV[b]),
      limit = tonumber(ARGV[b + 1]),
      window = tonumber(ARGV[b + 2]),
      burst = tonumber(ARGV[b + 3]),
      cost = tonumber(ARGV[b + 4]),
      force = flags % 2 == 1,
      shadow = math.floor(flags / 2) % 2 == 1,
    }
  end

  -- Earlier item of the same key, so a key twice in one request sees itself.
  local function earlier(i)
    for j = i - 1, 1, -1 do
      if items[j].key == items[i].key then return j end
    end
    return nil
  end

  for i = 1, n do
    local st
    local j = earlier(i)
    if j then
      loaded[i] = loaded[j]
      st = states[j]
    else
      loaded[i] = load_state(items[i])
      st = loaded[i]
    end
    states[i], results[i] = decide(st, items[i], now, items[i].cost, items[i].force)
  end

  local vetoed = false
  for i = 1, n do
    local r = results[i]
    if not r.allowed and not items[i].shadow and not items[i].force then vetoed = true end
  end

  if vetoed then
    for i = 1, n do
      if results[i].allowed then
        local _, r = decide(loaded[i], items[i], now, 0, false)
        results[i] = r
      end
    end
  else
    for i = 1, n do
      local last = true
      for j = i + 1, n do
        if items[j].key == items[i].key then last = false end
      end
      if last then store_state(items[i], states[i], results[i].reset) end
    end
  end

  out[#out + 1] = now
  for i = 1, n do
    local r = results[i]
    out[#out + 1] = r.allowed and 1 or 0
    out[#out + 1] = r.remaining
    out[#out + 1] = r.retry
    out[#out + 1] = r.reset
  end
end

local requests = tonumber(ARGV[1])

-- Load every string state of the call with one MGET.
local strings, a, k = {}, 2, 1
for _ = 1, requests do
  local n = tonumber(ARGV[a + 1])
  for i = 0, n - 1 do
    local kind = ALGORITHMS[tonumber(ARGV[a + 2 + 6 * i])]
    if kind and kind.fields then strings[#strings + 1] = KEYS[k + i] end
  end
  k, a = k + n, a + 2 + 6 * n
end
prefetch(strings)

local clock
local out = {}
a, k = 2, 1
for _ = 1, requests do
  local now = tonumber(ARGV[a])
  if not now then
    if not clock then
      local t = redis.call('TIME')
      clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = clock
  end
  local n = tonumber(ARGV[a + 1])
  -- A request that fails (a key of another type, say) fails alone: its
  -- reply is now = -1 and zeros, the others of the call stand. What it
  -- stored before failing stays, as it would in a call of its own.
  local reply = {}
  local ok, err = pcall(decide_request, k, a + 2, n, now, reply)
  if not ok then
    redis.log(redis.LOG_WARNING, 'sluice decide: ' .. tostring(err))
    reply = { -1 }
    for _ = 1, 4 * n do reply[#reply + 1] = 0 end
  end
  for i = 1, #reply do out[#out + 1] = reply[i] end
  k, a = k + n, a + 2 + 6 * n
end
return out
