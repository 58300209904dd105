-- sluice: the algorithm for an item's kind, as pkg/algorithm.Decide.
local ALGORITHMS = { [0] = token_bucket, [1] = gcra, [2] = sliding_window, [3] = fixed_window, [4] = sliding_log }

-- force records the cost even where it does not fit and answers as a
-- zero-cost check right after would: for the next request.
local function decide(st, p, now, cost, force)
  local algorithm = ALGORITHMS[p.kind] or token_bucket
  if force then
    st = algorithm(st, p, now, cost, true)
    local _, r = algorithm(st, p, now, 0, false)
    return st, r
  end
  return algorithm(st, p, now, cost, false)
end
