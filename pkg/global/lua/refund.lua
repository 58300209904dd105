-- sluice: give back what a decide call took, for a request whose limits
-- span several Cluster slots and that another slot's limit rejected
-- (take-then-refund; see pkg/global/redis.go for the race window).
-- KEYS[i] the state of item i
-- ARGV[1] the `now` the take ran at (its reply's first element)
-- ARGV[2+3(i-1) ...] per item: kind, cost, interval µs (gcra: window/limit), window µs
local taken = tonumber(ARGV[1])
for i = 1, #KEYS do
  local b = 2 + (i - 1) * 4
  local key, kind, cost = KEYS[i], tonumber(ARGV[b]), tonumber(ARGV[b + 1])
  local interval, window = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if kind == 4 then
    redis.call('LREM', key, -cost, string.format('%.17g', taken))
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
