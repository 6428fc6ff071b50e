"""How a pick is decided, for the sweep and for every reader of its files: statistics from the
raw samples (stats), selection with an indifference zone (selection: practical equivalence, the
smallest difference this sweep resolves, racing, the pick among equals), the order of the ranked
table and which rows stand in for the leader (ranking), the one rule for "as good as the best"
and the pick (choice: the cheapest within the tolerance of the best), how sure a sweep's pick is,
stored beside its CSV (decision), and advice checked against what was measured (advice). Offline."""
