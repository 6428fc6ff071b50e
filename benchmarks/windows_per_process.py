"""How many counted windows a trial process should hold, from the two levels of noise sweeps saw.

A config's mean over p processes of m windows each has variance sigma_p^2 / p + sigma_w^2 / (p m),
where sigma_p is the spread between processes (log throughput) and sigma_w a window's own; a
process costs its start-up c (start, build, first batch, warm-up, teardown) plus m windows of w
seconds. For a given variance the cost is least at m* = sqrt(c sigma_w^2 / (w sigma_p^2))
(two-stage sampling: Cochran, Sampling Techniques, ch. 10; docs/methodology.md).

A sweep measures one window a process, so its own files cannot part the two levels. With
`--measure CONFIG` this measures them: for each of the settings given (`--settings`, JSON, one
object each), `--processes` fresh processes in alternating order, each running the sweep's loop
(loadtune.measure.loop.measure_loop over benchmarks/plain_loop.py's build of the config: its
dataset, loader and step; its measure block's warm-up, batches and epoch length) for `--windows`
counted windows back to back, and prints for each settings and pooled over them:
  sigma_w  the spread of a window's log throughput about its process's mean (pooled);
  sigma_p  the spread of the process means about the settings' mean, less sigma_w^2 / m;
  c, w     the median seconds of a process outside its counted windows (building the loader,
           the first batch, the warm-up, the teardown; not the interpreter's start, which the
           sweep's forked trial processes do not pay) and of one window;
  m*       the windows a process should hold (1 below 1.5).
Without --measure it reads the samples files given (NAME.samples.json.gz), pooled by config: a
sweep's, which show the levels only where their processes held several windows.

No goal: the figures that decide how the sweep spends its processes; exits 0 once printed.

    python benchmarks/windows_per_process.py --measure CONFIG.yaml --settings '{"num_workers": 2}' ...
    python benchmarks/windows_per_process.py RESULTS_DIR_OR_SAMPLES_FILE...
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadtune.record.measurement import Measurement, Window  # noqa: E402
from loadtune.record.samples import SUFFIX, SamplesFile  # noqa: E402

MIN_DOF = 4  # degrees of freedom between processes below which no m* is given


@dataclass
class Pooled:
    """What the sweeps of one pipeline saw, pooled."""

    files: list[str] = field(default_factory=list)
    within_ss: float = 0.0  # windows of the same process about their process's mean (log throughput)
    within_dof: int = 0
    between_ss: float = 0.0  # process means about their trial's mean
    between_dof: int = 0
    windows: list[int] = field(default_factory=list)  # windows per process
    outside_s: list[float] = field(default_factory=list)
    window_s: list[float] = field(default_factory=list)


def _wall_s(window: Window) -> float:
    """A counted window's wall time: its batches' waits, transfers and steps."""
    return sum(window.wait_s) + sum(window.h2d_s) + sum(window.step_s)


def _window_logs(measurement: Measurement) -> list[float]:
    """Each counted window's log throughput (its samples over its wall)."""
    logs = []
    for window in measurement.windows:
        wall_s = _wall_s(window)
        if wall_s > 0 and sum(window.samples) > 0:
            logs.append(math.log(sum(window.samples) / wall_s))
    return logs


def add_trial(into: Pooled, processes: list[tuple[list[float], float, float]]) -> None:
    """One settings' processes, each (its windows' log throughputs, seconds outside its windows,
    seconds of one window), into the pool."""
    means = []
    for logs, outside_s, window_s in processes:
        if not logs:
            continue
        if len(logs) >= 2:
            into.within_ss += float(np.var(logs, ddof=1)) * (len(logs) - 1)
            into.within_dof += len(logs) - 1
        means.append(float(np.mean(logs)))
        into.windows.append(len(logs))
        into.outside_s.append(outside_s)
        into.window_s.append(window_s)
    if len(means) >= 2:
        into.between_ss += float(np.var(means, ddof=1)) * (len(means) - 1)
        into.between_dof += len(means) - 1


def read_into(path: Path, pooled: dict[str, Pooled]) -> None:
    stored = SamplesFile(path).read()
    if stored is None:
        return
    into = pooled[stored.config_sha[:12]]
    into.files.append(path.name.removesuffix(SUFFIX))
    for trial in stored.trials.values():
        processes = []
        for measurement, wall_s in zip(trial.measurements, trial.walls_s):
            logs = _window_logs(measurement)
            if not logs or measurement.behind or measurement.ranks:
                continue
            counted = sum(_wall_s(w) for w in measurement.windows)
            processes.append((logs, wall_s - counted, counted / len(logs)))
        add_trial(into, processes)


# --- measuring: fresh processes of the sweep's loop -----------------------------------------------


def child(config: Path, settings: dict[str, Any], windows: int) -> dict[str, Any]:
    """One process: the config's loader with `settings` through measure_loop, `windows` windows."""
    import torch  # noqa: F401 - imported before the clock starts: a trial process has it already
    from plain_loop import build

    from loadtune.measure.loop import measure_loop

    start = time.perf_counter()
    built = build(config, settings)
    measure = built.measure
    measurement = measure_loop(built.loader, built.step, warmup_batches=int(measure.get("warmup_batches", 5)),
                               batches=int(measure.get("batches") or measure.get("epoch_batches") or 32),
                               repeats=windows,
                               epoch_batches=measure.get("epoch_batches"),
                               default_batch_size=int(built.kwargs.get("batch_size") or 1), fingerprint=False)
    del built
    wall_s = time.perf_counter() - start
    counted = sum(_wall_s(w) for w in measurement.windows)
    return {"logs": _window_logs(measurement), "outside_s": wall_s - counted, "window_s": counted / windows}


def measure(config: Path, settings: list[dict[str, Any]], processes: int, windows: int) -> list[Pooled]:
    """Each settings' `processes` fresh processes, alternating (A B, B A, ...)."""
    runs: dict[int, list[tuple[list[float], float, float]]] = defaultdict(list)
    for p in range(processes):
        for i in (range(len(settings)) if p % 2 == 0 else reversed(range(len(settings)))):
            done = subprocess.run([sys.executable, __file__, "--child", str(config), json.dumps(settings[i]),
                                   str(windows)], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"{settings[i]}: {done.stderr.strip().splitlines()[-1:]}")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            runs[i].append((got["logs"], got["outside_s"], got["window_s"]))
    each = []
    for i, one in enumerate(settings):
        pooled = Pooled(files=[json.dumps(one)])
        add_trial(pooled, runs[i])
        each.append(pooled)
    every = Pooled(files=["all settings"])
    for i in range(len(settings)):
        add_trial(every, runs[i])
    return each + [every]


def line(pooled: Pooled) -> str:
    name = sorted(pooled.files)[0]
    if not pooled.window_s:
        return f"{name}: no windows to read"
    c_s, w_s = float(np.median(pooled.outside_s)), float(np.median(pooled.window_s))
    m = float(np.mean(pooled.windows))
    head = (f"{name} ({len(pooled.windows)} processes, {m:.1f} windows each): c {c_s:.2f} s, w {w_s:.2f} s, "
            f"dof within {pooled.within_dof}, between {pooled.between_dof}")
    if pooled.within_dof < MIN_DOF or pooled.between_dof < MIN_DOF:
        return head + ": too few repeats to part the two levels"
    sw2 = pooled.within_ss / pooled.within_dof
    sp2 = pooled.between_ss / pooled.between_dof - sw2 / m
    text = head + f"; sigma_w {math.sqrt(sw2):.4f}"
    if sp2 <= 0:
        return text + ", sigma_p 0 (processes differ no more than their windows): m* unbounded"
    m_star = math.sqrt(c_s * sw2 / (w_s * sp2))
    return text + f", sigma_p {math.sqrt(sp2):.4f}: m* {m_star:.2f}, {round(m_star) if m_star >= 1.5 else 1} a process"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--measure", type=Path, help="a config: measure its loop in fresh processes")
    parser.add_argument("--settings", nargs="+", default=['{}'], help="loader settings, a JSON object each")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), json.loads(args.child[1]), int(args.child[2]))))
        return 0
    if args.measure:
        every = measure(args.measure, [json.loads(s) for s in args.settings], args.processes, args.windows)
    else:
        files = [p for path in args.paths for p in (sorted(path.glob(f"**/*{SUFFIX}")) if path.is_dir() else [path])]
        pooled: dict[str, Pooled] = defaultdict(Pooled)
        for path in files:
            read_into(path, pooled)
        every = sorted(pooled.values(), key=lambda p: sorted(p.files)[0])
    for each in every:
        print(line(each), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
