"""How a sweep's wall time grows with the dataset and with the number of trials.

A dataset's size should cost only its construction (each trial process builds it from the
factory; no data is ever copied into a trial), so at a fixed measurement the wall time must
stay flat from 10^3 to 10^6 items; with the number of trials it grows in proportion. Both
are printed, with the time per trial process.

No goal is checked (no bound says how flat is flat): a measurement; exits 0 once its figures are
printed.

    python benchmarks/sweep_scale.py [--quick]
"""

from __future__ import annotations

import sys
import time

from _common import WORK, machine_line, spec_from

from loadtune.asked.options import SweepOptions
from loadtune.sweep_process import events
from loadtune.sweep_process.pipeline import run_sweep

MEASURE = {"warmup_batches": 2, "batches": 20, "repeats": 2, "min_repeats": 2, "timeout_s": 120}


def timed(sizes_items: int, workers: list[int]) -> tuple[float, int]:
    spec = spec_from({"dataset": {"factory": "loadtune.synthetic:sleep_cost",
                                  "kwargs": {"num_samples": sizes_items, "cost_s": 0.0005}},
                      "loader": {"batch_size": 16, "num_workers": 1, "shuffle": True},
                      "sweep": {"num_workers": workers}, "step": {"sleep_s": 0.004}, "measure": MEASURE,
                      "device": "cpu"}, name=f"scale-{sizes_items}-{len(workers)}")
    runs = []
    start = time.perf_counter()
    run_sweep(SweepOptions.of(spec.path, out=WORK / f"scale-{sizes_items}-{len(workers)}.csv"), spec=spec,
              on_event=lambda e: runs.append(e) if isinstance(e, events.RunFinished) else None)
    return time.perf_counter() - start, len(runs)


def main() -> int:
    quick = "--quick" in sys.argv
    print(machine_line())
    sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 10**6]
    print("dataset size (items), 2 trials + ideal:")
    walls = []
    for size in sizes:
        wall, runs = timed(size, [2])
        walls.append(wall)
        print(f"  {size:>9,d}: {wall:6.1f} s, {runs} trial processes, {wall / runs:5.2f} s each")
    print(f"  largest / smallest: {max(walls) / min(walls):.2f} (flat: the data is never copied per trial)")
    print("trials (10^4 items):")
    for workers in ([2], [0, 2, 3], [0, 2, 3, 4, 5]):
        wall, runs = timed(10**4, workers)
        print(f"  {len(workers) + 1} trials + ideal: {wall:6.1f} s, {runs} trial processes, {wall / runs:5.2f} s each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
