"""Where a default sweep's time goes, per pipeline, and what it costs beyond what it measures.

Runs the default sweep (`run_sweep`, as `loadtune sweep CONFIG` runs it, in this process so its
parts can be timed) of each pipeline: the demo (configs/demo.yaml), the four of
benchmarks/recommend.py (cnn, io, cpu, mixed) and those of benchmarks/pipelines.py (small
models trained on the CPU with torch's own threads: cnn-threads, and saturated-text, whose
tokenizing and step keep the cores busy at the baseline). Its wall time is split into:

  preflight            building the user's parts once and checking the machine, before the first trial
  process start/exit   each trial process's start, exit, sampler and result transfer
  factory and build    dataset, loader and step built in each trial process
  first batch          worker start-up and the first batch of each trial process
  warm-up              the warm-up batches after it
  counted              the counted windows (the measurement itself), of which
    epoch starts       the waits of the epochs' first batches inside them
  model fits           fitting the pipeline model and predicting from it
  file writes          the CSV and raw samples written as trials finish
  bookkeeping          the rest: the sweep's own decisions, records and conclusion

and the trial processes are counted by what asked for them: the first process of each trial
and its racing repeats (a trial's second and later processes), whose share of the wall is
shown. Goal: wall / counted windows <= 1.20 on the demo. Exits 1 when a goal is missed (or
none was checked: name the demo or give --reference-ref).

With --reference-ref REF it also times the default sweep through the command line with this
tree and with REF's (`git archive`), in alternating order (A B B A over the pipelines), and
prints each pipeline's wall ratio; goals: the demo's sweep through the command line <= 35 s, and
the sum of this tree's wall over the other pipelines <= 0.5x REF's (exits 1 when missed).

    python benchmarks/sweep_cost.py [--pipelines demo,cnn,...|all] [--reference-ref REF] [--keep DIR]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from _common import Goals, machine_line
from recommend import EPOCH_BATCHES, PIPELINES, SWEEP, fetch_reference, run_sweep, workspace

from loadtune.asked.config import load_config
from loadtune.asked.options import SweepOptions
from loadtune.sweep_process import events
from loadtune.sweep_process.files import SweepFiles
from loadtune.sweep_process.modelling import Modelling
from loadtune.sweep_process.pipeline import run_sweep as run_sweep_here

ROOT = Path(__file__).resolve().parents[1]
DEMO = "demo"
GOAL_DEMO_RATIO = 1.20
GOAL_WALL_RATIO = 0.5
GOAL_DEMO_WALL_S = 35.0
ALL = {DEMO: None, **PIPELINES}
DEFAULT = (DEMO, "cnn", "io", "cpu", "mixed", "cnn-threads", "saturated-text")
MODEL_METHODS = ("fit", "held_out_error", "error", "predict_new", "tie", "predicted_records", "report")
FILE_METHODS = ("append", "replace", "store")


@dataclass
class Breakdown:
    """One sweep's wall time, by part (seconds)."""

    wall_s: float = 0.0
    parts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    processes: int = 0
    repeat_processes: int = 0
    repeat_wall_s: float = 0.0
    trials: int = 0


class Timed:
    """Wraps methods of a class so that the seconds spent in them add up under one label
    (outermost calls only: a model fit calling another counts once)."""

    def __init__(self, into: Breakdown, label: str, cls: type, names: tuple[str, ...]) -> None:
        self.into, self.label, self.cls, self.names = into, label, cls, names
        self.saved: dict[str, Any] = {}
        self.depth = 0

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.into.parts[self.label] += time.perf_counter() - start
        return timed

    def __enter__(self) -> "Timed":
        for name in self.names:
            if hasattr(self.cls, name):
                self.saved[name] = self.cls.__dict__[name]
                setattr(self.cls, name, self._wrap(getattr(self.cls, name)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, method in self.saved.items():
            setattr(self.cls, name, method)


def write_config(work: Path, name: str) -> Path:
    if name == DEMO:
        return ROOT / "configs" / "demo.yaml"
    pipeline = ALL[name]
    config = {"name": f"cost-{name}", "dataset": pipeline["dataset"], "loader": pipeline["loader"],
              "sweep": SWEEP, "step": pipeline["step"],
              "measure": {"epoch_batches": EPOCH_BATCHES, "timeout_s": 300}, "device": "cpu"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def build_once(config: Path) -> None:
    """The dataset's files made before timing (the demo's JPEG cache, saturated-text's documents):
    not a cost of the sweep."""
    from loadtune.parts.factory import build_source

    spec = load_config(config)
    build_source(spec.config.dataset.factory, spec.config.dataset.kwargs, spec.base_dir)


def breakdown(config: Path, out: Path) -> Breakdown:
    """One default sweep of `config`, in this process, with its wall split into parts."""
    b = Breakdown()
    marks: dict[str, float] = {}
    seen: set[str] = set()

    def on_event(event: Any) -> None:
        now = time.perf_counter()
        if isinstance(event, events.SweepStarted):
            marks.setdefault("started", now)
        elif isinstance(event, events.RunStarted):
            marks.setdefault("first_run", now)
            marks["run"] = now
            marks["repeat"] = event.repeat
        elif isinstance(event, events.RunFinished):
            b.parts["runs (sweep side)"] += now - marks.pop("run", now)
            outcome = event.outcome
            b.processes += 1
            if marks.get("repeat", 1) > 1:
                b.repeat_processes += 1
                b.repeat_wall_s += outcome.wall_s
            seen.add(event.trial.name)
            m = outcome.result
            inside = 0.0
            if m is not None and hasattr(m, "windows"):
                counted = sum(sum(w.wait_s) + sum(w.h2d_s) + sum(w.step_s) for w in m.windows)
                starts = sum(s for w in m.windows for s, first in zip(w.wait_s, w.epoch_start) if first)
                b.parts["counted"] += counted
                b.parts["  epoch starts"] += starts
                b.parts["factory and build"] += m.start.setup_s
                b.parts["first batch"] += m.start.first_batch_s
                b.parts["warm-up"] += m.start.warmup_s
                inside = counted + m.start.setup_s + m.start.first_batch_s + m.start.warmup_s
            b.parts["process start/exit"] += max(outcome.wall_s - inside, 0.0)
        elif isinstance(event, events.SweepFinished):
            marks["finished"] = now

    start = time.perf_counter()
    with Timed(b, "model fits", Modelling, MODEL_METHODS), Timed(b, "file writes", SweepFiles, FILE_METHODS):
        run_sweep_here(SweepOptions.of(config, out=out), on_event=on_event)
    b.wall_s = time.perf_counter() - start
    b.trials = len(seen)
    b.parts["preflight"] = marks.get("first_run", start) - start
    sweep_side = b.parts.pop("runs (sweep side)")
    # Launch overhead seen from the sweep's side beyond the trial's own wall (fork, pickling).
    b.parts["process start/exit"] += max(sweep_side - sum(b.parts[k] for k in (
        "counted", "factory and build", "first batch", "warm-up", "process start/exit")), 0.0)
    accounted = sum(v for k, v in b.parts.items() if not k.startswith("  "))
    b.parts["bookkeeping"] = max(b.wall_s - accounted, 0.0)
    return b


ORDER = ("preflight", "process start/exit", "factory and build", "first batch", "warm-up", "counted",
         "  epoch starts", "model fits", "file writes", "bookkeeping")


def print_breakdown(name: str, b: Breakdown) -> None:
    counted = b.parts["counted"]
    print(f"{name}: wall {b.wall_s:.1f} s, {b.trials} trials in {b.processes} trial processes "
          f"({b.repeat_processes} racing repeats, {b.repeat_wall_s:.1f} s = {b.repeat_wall_s / b.wall_s:.0%} of the "
          f"wall); wall / counted {b.wall_s / max(counted, 1e-9):.2f}", flush=True)
    for label in ORDER:
        seconds = b.parts.get(label, 0.0)
        print(f"  {label:<22} {seconds:7.1f} s  {seconds / b.wall_s:6.1%} of wall", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default=",".join(DEFAULT),
                        help=f"comma-separated, of {', '.join(ALL)}, or all (default {','.join(DEFAULT)})")
    parser.add_argument("--reference-ref", default=None,
                        help="also time each default sweep through the command line with this tree and REF's")
    parser.add_argument("--keep", type=Path, default=None, help="keep configs, CSVs and logs in this folder")
    args = parser.parse_args()
    names = list(ALL) if args.pipelines == "all" else [n.strip() for n in args.pipelines.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL]
    if unknown:
        parser.error(f"unknown pipeline(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    scratch, work = workspace(args.keep, "loadtune-cost-")
    goals = Goals()
    print(machine_line(), flush=True)
    configs = {name: write_config(work, name) for name in names}
    for config in configs.values():
        build_once(config)
    for name, config in configs.items():
        b = breakdown(config, work / f"{name}-here.csv")
        print_breakdown(name, b)
        if name == DEMO:
            goals.check("demo: sweep wall / counted windows", b.wall_s / max(b.parts["counted"], 1e-9), "<=",
                        GOAL_DEMO_RATIO, spec=".2f")
    if args.reference_ref:
        ref_code = scratch / "reference"
        commit = fetch_reference(args.reference_ref, ref_code)
        walls: dict[str, dict[str, float]] = {}
        for index, (name, config) in enumerate(configs.items()):
            order = [("now", ROOT), ("ref", ref_code)]
            walls[name] = {}
            for label, code in order if index % 2 == 0 else order[::-1]:
                walls[name][label] = run_sweep(code, config, work / f"{name}-cli-{label}.csv").seconds
            print(f"{name}: default sweep {walls[name]['now']:.1f} s, {commit}'s {walls[name]['ref']:.1f} s: "
                  f"{walls[name]['now'] / walls[name]['ref']:.2f}x", flush=True)
        if DEMO in walls:
            goals.check("demo: default sweep wall through the command line, s", walls[DEMO]["now"], "<=",
                        GOAL_DEMO_WALL_S, spec=".1f")
        others = [w for name, w in walls.items() if name != DEMO]
        if others:
            total_now = sum(w["now"] for w in others)
            total_ref = sum(w["ref"] for w in others)
            goals.check(f"default sweep wall, pipelines other than the demo, vs {commit}", total_now / total_ref,
                        "<=", GOAL_WALL_RATIO, spec=".2f", detail=f" ({total_now:.0f} s vs {total_ref:.0f} s)")
    return goals.exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
