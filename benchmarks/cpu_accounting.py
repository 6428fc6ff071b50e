"""Does loadtune's CPU figure agree with the kernel's?

For pipelines that keep the cores busy (CPU-burning samples, pure-Python arithmetic, more
workers than cores) and one that does not (sleeping samples), a baseline trial is run as a
sweep runs it, and three figures of its counted window are printed side by side:
  loadtune: the trial tree's CPU (each thread's run time, read inside the trial at the
            window's edges) / wall / usable cores: the `cpu_util` column;
  kernel:   the whole machine's busy share over the same window, from /proc/stat;
  sampler:  the same figure taken the old way, from the sweep's sampler of the tree over
            its whole span (warm-up and teardown included), for reference.
Goal, on a quiet machine: |loadtune - kernel| <= 0.05 on every pipeline (the machine runs
nothing but the trial: whatever else is busy shows as the difference).
Exits 1 when the goal is missed or a trial fails.

    python benchmarks/cpu_accounting.py [--repeats N]
"""

from __future__ import annotations

import statistics
import sys

from _common import Goals, machine_line, run_baseline, spec_from

from loadtune.measure.diagnose import resource_figures, window_evidence
from loadtune.measure.machine import usable_cores

GOAL = 0.05


def pipelines(cores: int) -> dict[str, dict]:
    return {
        "cpu, workers = cores": ({"factory": "loadtune.synthetic:cpu_cost",
                                  "kwargs": {"num_samples": 4000, "cost_s": 0.003}},
                                 {"batch_size": 8, "num_workers": cores}, 0.001),
        "cpu, 2x workers": ({"factory": "loadtune.synthetic:cpu_cost",
                             "kwargs": {"num_samples": 4000, "cost_s": 0.003}},
                            {"batch_size": 8, "num_workers": 2 * cores}, 0.001),
        "python arithmetic, batch 8": ({"factory": "loadtune.synthetic:python_arithmetic",
                                        "kwargs": {"num_samples": 4000, "work": 20000}},
                                       {"batch_size": 8, "num_workers": cores}, 0.004),
        "sleeping samples": ({"factory": "loadtune.synthetic:sleep_cost",
                              "kwargs": {"num_samples": 4000, "cost_s": 0.002}},
                             {"batch_size": 8, "num_workers": cores}, 0.004),
    }


def main() -> int:
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 3
    cores = usable_cores()
    print(machine_line())
    print(f"{'pipeline':<28} {'loadtune':>9} {'kernel':>7} {'diff':>6} {'sampler':>8}")
    worst = 0.0
    for name, (dataset, loader, step_s) in pipelines(cores).items():
        spec = spec_from({"dataset": dataset, "loader": loader, "step": {"sleep_s": step_s},
                          "measure": {"warmup_batches": 5, "batches": 100, "repeats": 1, "timeout_s": 120},
                          "device": "cpu"}, name="cpu")
        ours, kernel, sampler = [], [], []
        for _ in range(repeats):
            outcome, _ = run_baseline(spec)
            if outcome.result is None:
                print(f"{name}: {outcome.status}: {outcome.reason}")
                return 1
            inside = window_evidence(outcome.result, cores, loader["num_workers"])
            ours.append(inside.cpu_util)
            kernel.append(inside.machine_busy)
            sampler.extend(f.cpu.cpu_util for f in resource_figures(outcome.result, cores))
        a, k = statistics.fmean(ours), statistics.fmean(kernel)
        worst = max(worst, abs(a - k))
        sampled = statistics.fmean(sampler) if sampler else float("nan")
        print(f"{name:<28} {a:9.3f} {k:7.3f} {a - k:+6.3f} {sampled:8.3f}")
    goals = Goals()
    goals.check("largest |loadtune - kernel|", worst, "<=", GOAL)
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
