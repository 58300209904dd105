-- sluice: give back what a decide call took, for a request whose limits
-- span several Cluster slots and that another slot's limit rejected
-- (take-then-refund; see pkg/global/redis.go for the race window). Mirrors
-- pkg/algorithm.Refund.
-- KEYS[i] the state of item i
-- ARGV[1] the `now` the take ran at (its reply's first element)
-- ARGV[2+6(i-1) ...] per item: kind, limit, window µs, cost, origin µs,
--   holder (algorithm.Params.Holder; empty for the kinds without one)

-- refund_state gives back what a take of item.cost at taken consumed, as
-- pkg/algorithm.Refund does, leaving the key's expiry as it was.
local function refund_state(item, taken)
  local a = algorithm_of(item.kind)
  if item.cost <= 0 then return end
  if a.refund_key then return a.refund_key(item, taken, item.cost) end
  local st = load_state(item)
  if not st.exists then return end
  local packed = st.packed
  st = a.refund(st, item, taken, item.cost)
  local v = encode(a, st, packed) -- as it was stored
  call('SET', item.key, v, 'KEEPTTL')
  values[item.key] = v
end

bind()
local taken = tonum(ARGV[1])
for i = 1, #KEYS do
  local b = 2 + (i - 1) * 6
  refund_state({
    key = KEYS[i],
    kind = tonum(ARGV[b]),
    limit = tonum(ARGV[b + 1]),
    window = tonum(ARGV[b + 2]),
    cost = tonum(ARGV[b + 3]),
    origin = tonum(ARGV[b + 4]),
    holder = ARGV[b + 5],
  }, taken)
end
return {}
