"""How a pick is decided, for the sweep and for every reader of its files: statistics from the
raw samples (stats); which measured trials are as good as the best, with an indifference zone
(selection: acceptable, that is as_good or equal_within_noise; the smallest difference this sweep
resolves, racing, the baseline kept unless a change is shown to pay); the order of the ranked
table and which rows stand in for the leader, tied_with_best marked by selection's rule
(ranking); the pick among the equals, the cheapest, and the tolerance test on single figures that
predictions and the search use (choice: choose, within_tolerance, beats); how sure a sweep's pick
is, stored beside its CSV (decision); and advice checked against what was measured (advice).
Offline."""
