"""What a sweep costs beyond what it measures: wall time / the sum of its counted windows.

Runs the demo config's sweep (configs/demo.yaml unless another is given) and prints the
ratio, then where the rest goes: the preflight (building the user's parts once), process
start and exit, building dataset/loader/step in each trial process, worker start-up and the
first batch, the warm-up batches, and the sweep's own bookkeeping. Goal: <= 1.5 for the demo.

    python benchmarks/sweep_cost.py [CONFIG]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _common import WORK, machine_line

from loadtune.config import load_config
from loadtune.options import SweepOptions
from loadtune.sweep_process import events
from loadtune.sweep_process.pipeline import run_sweep

GOAL_RATIO = 1.5


def main() -> int:
    config = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "configs" / "demo.yaml"
    spec = load_config(config)
    # Build the demo's image cache first: generating files once is not a cost of the sweep.
    from loadtune.trial_process.factory import build_source

    build_source(spec.config.dataset.factory, spec.config.dataset.kwargs, spec.base_dir)
    outcomes = []
    first_run = []

    def on_event(event):
        if isinstance(event, events.RunStarted) and not first_run:
            first_run.append(time.perf_counter())
        if isinstance(event, events.RunFinished):
            outcomes.append(event.outcome)

    out = WORK / "sweep.csv"
    start = time.perf_counter()
    run_sweep(SweepOptions(config, out=out), spec=spec, on_event=on_event)
    wall = time.perf_counter() - start
    measured = [o.result for o in outcomes if o.result is not None]
    counted = sum(sum(w.wait_s) + sum(w.h2d_s) + sum(w.step_s) for m in measured for w in m.windows)
    setup = sum(m.setup_s for m in measured)
    first = sum(m.first_batch_s for m in measured)
    warmup = sum(m.warmup_s for m in measured)
    runs = sum(o.wall_s for o in outcomes)
    preflight = first_run[0] - start if first_run else 0.0
    process = runs - counted - setup - first - warmup
    rest = wall - preflight - runs
    print(machine_line())
    print(f"config: {config} ({len(outcomes)} trial processes)")
    print(f"sweep wall time {wall:.1f} s, counted windows {counted:.1f} s: ratio {wall / counted:.2f} "
          f"(goal <= {GOAL_RATIO}: {'met' if wall / counted <= GOAL_RATIO else 'MISSED'})")
    for label, seconds in (("preflight (user parts built once)", preflight),
                           ("dataset, loader and step built per process", setup),
                           ("worker start-up and first batch", first),
                           ("warm-up batches", warmup),
                           ("process start, exit, sampler, transfer", process),
                           ("sweep bookkeeping between runs", rest)):
        print(f"  {label:<44} {seconds:6.1f} s  ({seconds / counted:5.1%} of counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
