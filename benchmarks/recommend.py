"""How close each strategy's pick comes to the best any search finds, and at what cost.

Three synthetic pipelines with different bottlenecks are swept with ofat, greedy and grid:
  io:    each sample sleeps (I/O-like): more workers than cores help;
  cpu:   each sample burns CPU (decode-like): the cores cap what workers can do;
  mixed: a little CPU and a little waiting, every 7th sample 8x slower (prefetch depth matters).
For each: the throughput of each strategy's pick (the recommended trial) divided by the grid's
best, looked up in the grid's own measurements so every figure comes from one run; the number
of trials each strategy measured; and the same ratio for two rules of thumb (num_workers=0
defaults; num_workers = cpu count with pin_memory). Goal: greedy within 3% of the grid's best
with at most a third of its trials.

    python benchmarks/recommend.py [--quick]
"""

from __future__ import annotations

import os
import sys
import time

from _common import WORK, machine_line, spec_from
from loadtune.plan import IDEAL
from loadtune.sweep import recommended, run_sweep

GOAL_RATIO = 0.97
GOAL_TRIAL_SHARE = 1 / 3
SETTINGS = ("num_workers", "prefetch_factor", "persistent_workers", "in_order")

PIPELINES = {
    "io": {"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 4000, "cost_s": 0.002}},
    "cpu": {"factory": "loadtune.synthetic:cpu_cost", "kwargs": {"num_samples": 4000, "cost_s": 0.0008}},
    "mixed": {"factory": "loadtune.synthetic:mixed_cost",
              "kwargs": {"num_samples": 4000, "cpu_s": 0.0003, "sleep_s": 0.0006, "slow_every": 7,
                         "slow_factor": 8.0}},
}


def config(dataset: dict, quick: bool) -> dict:
    return {
        "dataset": dataset,
        "loader": {"batch_size": 16, "num_workers": 1, "prefetch_factor": 2},
        "sweep": {
            "num_workers": [0, 1, 2, 3, 4, 6] if not quick else [0, 1, 2, 4],
            "prefetch_factor": [1, 2, 4],
            "persistent_workers": [False, True],
            "in_order": [True, False],
        },
        "step": {"sleep_s": 0.012},
        "measure": {"warmup_batches": 3, "batches": 15 if quick else 25, "epoch_batches": 40,
                    "repeats": 2, "timeout_s": 120},
        "device": "cpu",
    }


def key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ("num_workers", "prefetch_factor", "persistent_workers")) + (
        row["trial"].count("in_order=false") > 0,)


def main() -> int:
    quick = "--quick" in sys.argv
    print(machine_line())
    cores = os.cpu_count() or 1
    failed = False
    for name, dataset in PIPELINES.items():
        spec = spec_from(config(dataset, quick), name=f"recommend-{name}")
        runs, seconds = {}, {}
        for strategy in ("grid", "ofat", "greedy"):
            start = time.perf_counter()
            result = run_sweep(spec, WORK / f"{name}-{strategy}.csv", strategy=strategy)
            seconds[strategy] = time.perf_counter() - start
            runs[strategy] = [r for r in result.rows if r["trial"] != IDEAL]
        grid = {key(r): r["throughput"] for r in runs["grid"] if r["status"] == "ok"}
        best = max(grid.values())
        grid_trials = sum(1 for r in runs["grid"] if r["status"] == "ok")
        print(f"\n{name}: grid best {best:.1f} samples/s over {grid_trials} trials")
        for strategy in ("ofat", "greedy", "grid"):
            pick = recommended(runs[strategy])
            trials = sum(1 for r in runs[strategy] if r["status"] == "ok")
            ratio = grid.get(key(pick), float("nan")) / best
            print(f"  {strategy:>6}: pick {pick['trial']:<52} {ratio:6.3f} of best, {trials:3d} trials "
                  f"({trials / grid_trials:.2f} of grid's), {seconds[strategy]:5.0f} s")
            if strategy == "greedy" and (ratio < GOAL_RATIO or trials > GOAL_TRIAL_SHARE * grid_trials):
                failed = True
        defaults = grid.get((0, None, False, False))
        nw = min(cores, max(k[0] for k in grid))
        many = grid.get((nw, 2, False, False))
        print(f"  rule of thumb num_workers=0 (defaults): {defaults / best:6.3f} of best")
        if many is not None:
            print(f"  rule of thumb num_workers={nw} (cpu count) with pin_memory: {many / best:6.3f} of best "
                  "(pin_memory does nothing without an accelerator)")
    print(f"\ngoal: greedy >= {GOAL_RATIO} of the grid's best with <= {GOAL_TRIAL_SHARE:.2f} of its trials: "
          f"{'MISSED' if failed else 'met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
