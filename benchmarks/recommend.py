"""How close each strategy's pick comes to the best any search finds, and at what cost.

Three synthetic pipelines with different bottlenecks are swept with ofat, greedy and grid:
  io:    each sample sleeps (I/O-like): more workers than cores help;
  cpu:   each sample burns CPU (decode-like): the cores cap what workers can do;
  mixed: a little CPU and a little waiting, every 7th sample 8x slower (prefetch depth matters).
For each: the number of trials each strategy measured, and the throughput of each strategy's
pick (its recommended trial) divided by the throughput of the grid's best. The best of 61
noisy measurements is biased upwards (the winner's curse), so the picks, the grid's best and
two rules of thumb (num_workers=0 defaults; num_workers = cpu count with pin_memory) are
measured again, head to head: interleaved, each repeat in a process of its own. Goal: greedy
within 3% of the grid's best with at most a third of its trials.

    python benchmarks/recommend.py [--quick]
"""

from __future__ import annotations

import os
import sys
import time

import multiprocessing
import random
import statistics

from _common import WORK, machine_line, spec_from
from loadtune.trials import IDEAL, Trial
from loadtune.sweep_process.plan import trial_for
from loadtune.sweep_process.launch import run_in_trial_process
from loadtune.sweep_process.stats import summarize
from loadtune.sweep_process.runner import recommended, run_sweep
from loadtune.trial_process.jobs import TrialJob

GOAL_RATIO = 0.97
GOAL_TRIAL_SHARE = 1 / 3

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


HEAD_TO_HEAD_REPEATS = 6


def head_to_head(spec, trials: dict[str, Trial]) -> dict[str, float]:
    """Throughput of each trial, measured again interleaved in a shuffled order, one process
    per repeat; the mean over repeats."""
    cfg = spec.config
    measure = cfg.measure.model_copy(update={"repeats": 1})
    unique = {t.settings: t for t in trials.values()}
    found: dict[tuple, list[float]] = {k: [] for k in unique}
    rng = random.Random(1)
    for _ in range(HEAD_TO_HEAD_REPEATS):
        order = list(unique.items())
        rng.shuffle(order)
        for settings, trial in order:
            job = TrialJob(trial, cfg.dataset, cfg.step, measure, "cpu", str(spec.base_dir), os.getpid(),
                           multiprocessing.get_start_method())
            outcome = run_in_trial_process(job, cfg.measure.timeout_s)
            if outcome.result is not None:
                found[settings].append(summarize(outcome.result).throughput.mean)
    return {label: statistics.fmean(found[t.settings]) for label, t in trials.items() if found[t.settings]}


def main() -> int:
    quick = "--quick" in sys.argv
    print(machine_line())
    cores = os.cpu_count() or 1
    failed = False
    for name, dataset in PIPELINES.items():
        spec = spec_from(config(dataset, quick), name=f"recommend-{name}")
        runs, seconds, results = {}, {}, {}
        for strategy in ("grid", "ofat", "greedy"):
            start = time.perf_counter()
            results[strategy] = run_sweep(spec, WORK / f"{name}-{strategy}.csv", strategy=strategy)
            seconds[strategy] = time.perf_counter() - start
            runs[strategy] = [r for r in results[strategy].rows if r["trial"] != IDEAL]
        grid_rows = [r for r in runs["grid"] if r["status"] == "ok"]
        grid_trials = len(grid_rows)
        best_row = max(grid_rows, key=lambda r: r["throughput"])
        nw = min(cores, max(r["num_workers"] for r in grid_rows))
        contenders = {"grid's best": results["grid"].trials[best_row["trial"]]}
        for strategy in ("ofat", "greedy", "grid"):
            contenders[strategy] = results[strategy].trials[recommended(runs[strategy])["trial"]]
        contenders["num_workers=0 (defaults)"] = trial_for(spec.config, {"num_workers": 0}, False)
        contenders[f"num_workers={nw} (cpu count)"] = trial_for(spec.config, {"num_workers": nw}, False)
        again = head_to_head(spec, contenders)
        best = again["grid's best"]
        print(f"\n{name}: grid's best {best_row['trial']} ({best_row['throughput']:.1f} samples/s in the grid, "
              f"{best:.1f} head to head) over {grid_trials} trials")
        for strategy in ("ofat", "greedy", "grid"):
            trials = sum(1 for r in runs[strategy] if r["status"] == "ok")
            ratio = again[strategy] / best
            print(f"  {strategy:>6}: pick {contenders[strategy].name:<56} {ratio:6.3f} of best, {trials:3d} trials "
                  f"({trials / grid_trials:.2f} of grid's), {seconds[strategy]:5.0f} s")
            if strategy == "greedy" and (ratio < GOAL_RATIO or trials > GOAL_TRIAL_SHARE * grid_trials):
                failed = True
        print(f"  rule of thumb num_workers=0 (defaults): {again['num_workers=0 (defaults)'] / best:6.3f} of best")
        print(f"  rule of thumb num_workers={nw} (cpu count) with pin_memory: "
              f"{again[f'num_workers={nw} (cpu count)'] / best:6.3f} of best (pin_memory does nothing without an "
              "accelerator, so it is measured without)")
    print(f"\ngoal: greedy >= {GOAL_RATIO} of the grid's best with <= {GOAL_TRIAL_SHARE:.2f} of its trials: "
          f"{'MISSED' if failed else 'met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
