-- sluice: the algorithm for an item's kind, as pkg/algorithm.Decide.
local ALGORITHMS = { [0] = token_bucket, [1] = gcra, [2] = sliding_window, [3] = fixed_window, [4] = sliding_log }

local function decide(st, p, now, cost, force)
  return (ALGORITHMS[p.kind] or token_bucket)(st, p, now, cost, force)
end
