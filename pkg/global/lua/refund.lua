-- sluice: give back what a decide call took, for a request whose limits
-- span several Cluster slots and that another slot's limit rejected
-- (take-then-refund; see pkg/global/redis.go for the race window).
-- KEYS[i] the state of item i
-- ARGV[1] the `now` the take ran at (its reply's first element)
-- ARGV[2+4(i-1) ...] per item: kind, cost, interval µs (gcra: window/limit), window µs
local taken = tonumber(ARGV[1])
for i = 1, #KEYS do
  local b = 2 + (i - 1) * 4
  local key, kind, cost = KEYS[i], tonumber(ARGV[b]), tonumber(ARGV[b + 1])
  local interval, window = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if kind == 4 then
    -- The run at `taken` gives back cost units and every later run's
    -- running total drops by as much; a run left empty goes. Later runs
    -- (other requests' since) are few: the refund follows its take.
    local len = redis.call('LLEN', key)
    local runs, found = {}, nil
    for j = len, 1, -1 do
      local t, n, total = string.match(redis.call('LINDEX', key, j - 1), '^(%S+) (%S+) (%S+)$')
      if not t or tonumber(t) < taken then break end
      runs[j] = { t = tonumber(t), n = tonumber(n), total = tonumber(total) }
      if runs[j].t == taken then
        found = j
        break
      end
    end
    if found then
      for j = found, len do
        local r = runs[j]
        r.total = r.total - cost
        if j == found then r.n = r.n - cost end
        local v = ''
        if r.n > 0 then v = string.format('%.17g %.17g %.17g', r.t, r.n, r.total) end
        redis.call('LSET', key, j - 1, v)
      end
      redis.call('LREM', key, 1, '')
    end
  else
    local v = redis.call('GET', key)
    if v then
      local f = {}
      for word in string.gmatch(v, '%S+') do f[#f + 1] = tonumber(word) end
      if kind == 0 then
        f[1] = f[1] + cost -- the next decision caps it at the burst
      elseif kind == 1 then
        f[1] = f[1] - cost * interval
      else
        local start = taken - math.fmod(taken, window)
        if f[1] == start then
          f[2] = math.max(0, f[2] - cost)
        elseif kind == 2 and f[1] == start + window then
          f[3] = math.max(0, f[3] - cost)
        end
      end
      for j = 1, #f do f[j] = string.format('%.17g', f[j]) end
      redis.call('SET', key, table.concat(f, ' '), 'KEEPTTL')
    end
  end
end
return {}
