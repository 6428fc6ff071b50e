"""What loadtune's measured loop costs: the same pipeline timed by a bare loop and by the harness.

Both loops run in this one process on one DataLoader, alternating (bare, harness, bare, ...)
so drift of the machine hits both alike. Each block makes a new iterator, drops the same
warm-up batches, and times the same number of batches. The bare loop is
`for batch in loader: step(batch)` timed from outside; the harness is loadtune's
measure_loop, whose throughput is computed from its own per-batch timestamps (which add up
to the window's wall time). Prints loadtune/bare throughput. Goal: >= 0.99.

    python benchmarks/overhead.py [--blocks N]
"""

from __future__ import annotations

import statistics
import sys
import time

from torch.utils.data import DataLoader

from _common import machine_line
from loadtune.measure import measure_loop
from loadtune.stats import summarize
from loadtune.steps import sleep_step
from loadtune.synthetic import sleep_cost

GOAL_RATIO = 0.99
BATCH = 16
WARMUP = 5
BATCHES = 200
STEP_S = 0.004
COST_S = 0.0005  # 8 ms of loading per batch, spread over 2 workers: near balance with the step


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


def main() -> int:
    blocks = int(sys.argv[sys.argv.index("--blocks") + 1]) if "--blocks" in sys.argv else 5
    dataset = sleep_cost(BATCH * (BATCHES + WARMUP + 20) * 2, COST_S)
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True)
    step = sleep_step(STEP_S)
    print(machine_line())
    print(f"pipeline: sleep-cost dataset {COST_S * 1e3:g} ms/sample, batch {BATCH}, 2 workers, "
          f"{STEP_S * 1e3:g} ms sleep step; {BATCHES} batches per block")
    ratios = []
    for block in range(blocks):
        b = bare(loader, step)
        h = harness(loader, step)
        ratios.append(h / b)
        print(f"block {block + 1}: bare {b:8.1f} samples/s, loadtune {h:8.1f} samples/s, ratio {h / b:.4f}",
              flush=True)
    ratio = statistics.median(ratios)
    verdict = "met" if ratio >= GOAL_RATIO else "MISSED"
    print(f"loadtune/bare throughput (median of {blocks}): {ratio:.4f} (goal >= {GOAL_RATIO}: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
