"""What loadtune's measuring costs the loop it measures.

1. The harness's own work per batch (clock reads, bookkeeping, counting samples), timed on a
   loader of ready batches and a step that does nothing, against a bare `for` loop over the
   same: microseconds per batch, then as a share of a real pipeline's batch time. This is the
   precise figure.
2. End to end: the same real pipeline timed by a bare `for batch in loader: step(batch)` loop
   and by loadtune's measure_loop, alternating in ABBA order on one DataLoader (persistent
   workers); the ratio of throughputs with its 95% interval. Machine noise is a few percent
   per block, so this checks that nothing larger is hiding, not the last digit.
3. The resource sampling: the sweep process samples each trial's process tree from outside.
   Its CPU (share of one core) from the samples themselves, and the same pipeline run as a
   trial with and without sampling, alternating.
Goal: loadtune/bare throughput >= 0.99, sampled/unsampled >= 0.99. Exits 1 when either is missed.

    python benchmarks/overhead.py [--blocks N]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch
from _common import Goals, machine_line, run_baseline, spec_from
from torch.utils.data import DataLoader

import loadtune.sweep_process.launch as run
from loadtune.decide.stats import summarize
from loadtune.measure.loop import measure_loop
from loadtune.parts.steps import sleep_step
from loadtune.synthetic import sleep_cost

GOAL_RATIO = 0.99
BATCH = 16
WARMUP = 5
BATCHES = 400
STEP_S = 0.003
COST_S = 0.0001  # 1.6 ms of loading per batch over 2 workers: the loop runs at the step's pace
MICRO_BATCHES = 200_000


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% bootstrap interval of the mean."""
    arr = np.asarray(values)
    draws = np.random.default_rng(0).choice(arr, size=(5000, len(arr))).mean(axis=1)
    return float(arr.mean()), float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def harness_cost_us() -> float:
    """Extra microseconds per batch the measured loop spends over a bare loop."""
    batch = (torch.zeros(BATCH, 16), torch.arange(BATCH))
    ready = [batch] * MICRO_BATCHES

    def noop(_):
        return None

    best_bare = best_harness = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for b in ready:
            noop(b)
        best_bare = min(best_bare, time.perf_counter() - start)
        start = time.perf_counter()
        measure_loop(ready, noop, warmup_batches=1, batches=MICRO_BATCHES - 10, repeats=1)
        best_harness = min(best_harness, time.perf_counter() - start)
    return (best_harness - best_bare) / MICRO_BATCHES * 1e6


def bare(loader: DataLoader, step) -> float:
    it = iter(loader)
    for _ in range(WARMUP):
        step(next(it))
    samples = 0
    start = time.perf_counter()
    for _ in range(BATCHES):
        batch = next(it)
        step(batch)
        samples += len(batch[0])
    elapsed = time.perf_counter() - start
    del it
    return samples / elapsed


def harness(loader: DataLoader, step) -> float:
    m = measure_loop(loader, step, warmup_batches=WARMUP, batches=BATCHES, repeats=1)
    return summarize(m).throughput.mean


def end_to_end(blocks: int) -> float:
    dataset = sleep_cost(BATCH * (BATCHES + WARMUP + 20) * 2, COST_S)
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True)
    step = sleep_step(STEP_S)
    ratios, per_batch = [], []
    for block in range(blocks):
        if block % 2 == 0:  # ABBA: neither loop always goes first
            b = bare(loader, step)
            h = harness(loader, step)
        else:
            h = harness(loader, step)
            b = bare(loader, step)
        ratios.append(h / b)
        per_batch.append(BATCH / b)
        print(f"  block {block + 1}: bare {b:8.1f} samples/s, loadtune {h:8.1f} samples/s, ratio {h / b:.4f}",
              flush=True)
    mean, lo, hi = interval(ratios)
    print(f"  loadtune/bare throughput: {mean:.4f} [95% interval {lo:.4f}, {hi:.4f}] over {blocks} blocks")
    return statistics.median(per_batch)


def _unsampled(pid, main_pids=(), after_mains=None):
    """run._start_sampler without the sampler: the trial is told at once that it may go on."""
    if after_mains is not None:
        after_mains()
    return None


def sampling(blocks: int) -> tuple[float, float]:
    spec = spec_from({
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": BATCH * (BATCHES + 40), "cost_s": COST_S}},
        "loader": {"batch_size": BATCH, "num_workers": 2},
        "step": {"sleep_s": STEP_S},
        "measure": {"warmup_batches": WARMUP, "batches": BATCHES, "repeats": 1, "timeout_s": 120},
        "device": "cpu",
    }, name="overhead")
    sampler = run._start_sampler
    ratios, loads = [], []
    for block in range(blocks):
        runs = {}
        for sampled in ((True, False) if block % 2 == 0 else (False, True)):
            run._start_sampler = sampler if sampled else _unsampled
            outcome, stats = run_baseline(spec)
            runs[sampled] = stats.throughput.mean
            if sampled and outcome.result.resources:
                s = outcome.result.resources[0]
                loads.append(s.sampler_cpu_s / (s.samples[-1].t_s - s.samples[0].t_s))
        ratios.append(runs[True] / runs[False])
        print(f"  trial pair {block + 1}: sampled {runs[True]:8.1f} samples/s, unsampled {runs[False]:8.1f} "
              f"samples/s, ratio {ratios[-1]:.4f}", flush=True)
    run._start_sampler = sampler
    mean, lo, hi = interval(ratios)
    print(f"  sampled/unsampled throughput: {mean:.4f} [95% interval {lo:.4f}, {hi:.4f}] over {blocks} pairs")
    return statistics.fmean(loads), mean


def main() -> int:
    blocks = int(sys.argv[sys.argv.index("--blocks") + 1]) if "--blocks" in sys.argv else 10
    print(machine_line())
    print(f"pipeline: sleep-cost dataset {COST_S * 1e3:g} ms/sample, batch {BATCH}, 2 workers, "
          f"{STEP_S * 1e3:g} ms sleep step; {BATCHES} batches per block")
    cost_us = harness_cost_us()
    print(f"1. harness work per batch: {cost_us:.2f} us (bare loop vs measure_loop over ready batches)")
    print("2. end to end, ABBA:")
    per_batch_s = end_to_end(blocks)
    ratio = 1 - cost_us * 1e-6 / per_batch_s
    goals = Goals()
    goals.check("loadtune/bare throughput from the harness's own cost", ratio, ">=", GOAL_RATIO, spec=".5f",
                detail=f" ({cost_us:.2f} us of a {per_batch_s * 1e3:.2f} ms batch)")
    print("3. resource sampling (from the sweep process), ABBA:")
    load, sampled = sampling(max(4, blocks // 2))
    goals.check("sampled/unsampled throughput", sampled, ">=", GOAL_RATIO, spec=".4f",
                detail=f" (sampler CPU: {load:.2%} of one core)")
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
