"""How the warm-up changes a trial's figure and its spread between fresh processes.

A worker's first batches come slower (its start-up, its first touches of memory). With the
old warm-up of 5 batches, a window of persistent workers starts among them. This runs one
config's trial again and again in fresh trial processes, exactly as a sweep runs it, with the
per-worker warm-up off (`measure.warmup_batches_per_worker: 0`, the warm-up is 5 batches)
and at its default (5 a worker, within 0.3 s), in alternating order (A B, B A, ...), and prints each one's mean
samples/s, its spread between processes (sd, % of the mean) and the wall time per process.
Pipeline: the `io` one of recommend.py (each sample sleeps 1.3 ms, batch 16, one epoch of 50
batches per window, an 8 ms sleep as the step) and its `cnn` one; about 2 minutes. Workers that
are not persistent get no per-worker warm-up when an epoch is no longer than the window (each
window holds a fresh set of workers' first batches anyway), so no case here has them.

No goal: a measurement of what the per-worker warm-up changes; exits 0 once its figures are
printed (1 when a trial fails).

    python benchmarks/warmup_spread.py [--processes N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

from _common import machine_line, spec_from

from loadtune.asked.config import WARMUP_BATCHES_PER_WORKER
from loadtune.asked.plan import trial_for
from loadtune.decide.stats import summarize
from loadtune.sweep_process.launch import run_in_trial_process
from loadtune.trial_process.jobs import TrialJob

BENCH = Path(__file__).resolve().parent
IO = {"dataset": {"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 800, "cost_s": 0.0013}},
      "loader": {"batch_size": 16, "shuffle": True}, "step": {"sleep_s": 0.008}}
CNN = {"dataset": {"factory": f"{BENCH}/pipelines.py:augmented_images",
                   "kwargs": {"num_samples": 3200, "passes": 2, "read_s": 0.0003}},
       "loader": {"batch_size": 64}, "step": {"factory": f"{BENCH}/pipelines.py:make_cnn_step",
                                              "kwargs": {"width": 8, "threads": 1}}}
CASES = [("io", IO, {"num_workers": 3, "persistent_workers": True}),
         ("io", IO, {"num_workers": 6, "prefetch_factor": 4, "persistent_workers": True}),
         ("cnn", CNN, {"num_workers": 3, "persistent_workers": True})]


def job_for(pipeline: dict, settings: dict, per_worker: int, name: str) -> TrialJob:
    config = {**pipeline, "measure": {"epoch_batches": 50, "warmup_batches_per_worker": per_worker},
              "device": "cpu"}
    spec = spec_from(config, name)
    cfg = spec.config
    once = cfg.measure.model_copy(update={"repeats": 1})
    return TrialJob(trial_for(cfg, settings, False), cfg.dataset, cfg.step, once, "cpu", str(spec.base_dir),
                    os.getpid(), multiprocessing.get_start_method())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8, help="fresh processes per warm-up (default 8)")
    args = parser.parse_args()
    print(machine_line())
    for name, pipeline, settings in CASES:
        jobs = {pw: job_for(pipeline, settings, pw, f"{name}-{pw}") for pw in (0, WARMUP_BATCHES_PER_WORKER)}
        run_in_trial_process(jobs[0], 300)  # the trial server up, the dataset's files warm
        figures: dict[int, list[float]] = {pw: [] for pw in jobs}
        walls: dict[int, list[float]] = {pw: [] for pw in jobs}
        for i in range(args.processes):
            for pw in (list(jobs) if i % 2 == 0 else list(jobs)[::-1]):
                started = time.perf_counter()
                outcome = run_in_trial_process(jobs[pw], 300)
                walls[pw].append(time.perf_counter() - started)
                if outcome.result is None:
                    print(f"  {name} {settings}: trial {outcome.status}: {outcome.reason}", file=sys.stderr)
                    return 1
                figures[pw].append(summarize(outcome.result).throughput.mean)
        print(f"{name}: {', '.join(f'{k}={v}' for k, v in settings.items())}")
        for pw, values in figures.items():
            mean = statistics.mean(values)
            m = jobs[pw].measure
            extra = m.extra_warmup_for(settings["num_workers"], settings.get("persistent_workers", False))
            warmup = f"{m.warmup_batches} + {extra} within {m.warmup_per_worker_max_s} s"
            print(f"  warm-up {warmup:>18} batches: {mean:7.1f} samples/s, "
                  f"sd {100 * statistics.stdev(values) / mean:4.1f}% between processes, "
                  f"{statistics.mean(walls[pw]):.2f} s a process   [{' '.join(f'{v:.0f}' for v in values)}]",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
