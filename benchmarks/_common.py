"""Shared by the benchmark scripts: each goal checked and its exit status (Goals); configs written
to real files, trials run as the sweep runs them.

Goals is stdlib only, so any script can use it; what runs trials imports loadtune when called."""

from __future__ import annotations

import atexit
import math
import operator
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from loadtune.asked.config import RunSpec
    from loadtune.decide.stats import TrialStats
    from loadtune.sweep_process.launch import Outcome

WORK = Path(tempfile.mkdtemp(prefix="loadtune-bench-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)

# --- goals ----------------------------------------------------------------------------------------

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq,
}


@dataclass(frozen=True)
class Goal:
    """One goal as it was checked: what, whether it was met, and the line printed for it."""

    what: str
    met: bool
    line: str


class Goals:
    """A script's goals, each checked as its figure is known and printed at once in one form,
    `WHAT FIGURE[DETAIL]: met (goal >= 0.99)` (or `MISSED`); at the end `exit_status()` prints
    `goals: met` or `goals: MISSED: ...` and gives the script's exit status: 1 when any goal was
    missed, or when none was checked (a run that checked nothing has met nothing)."""

    def __init__(self, out: Callable[[str], None] | None = None) -> None:
        self.out = out if out is not None else (lambda line: print(line, flush=True))
        self.checked: list[Goal] = []

    def check(self, what: str, figure: float | None, op: str, goal: float, *, spec: str = ".3f",
              detail: str = "") -> bool:
        """A figure against its goal (`op` one of >=, <=, >, <, ==). A figure that is missing
        (None) or not a number could not be measured: the goal is missed."""
        compare = _COMPARE[op]
        known = figure is not None and not (isinstance(figure, float) and math.isnan(figure))
        met = bool(known and compare(figure, goal))
        shown = format(figure, spec) if known else "n/a"
        return self._note(what, met, f"{what} {shown}{detail}: {'met' if met else 'MISSED'} (goal {op} {goal:g})")

    def require(self, what: str, met: bool, goal: str, *, detail: str = "") -> bool:
        """A goal that is no single figure against a bound (every row ok, each check of a stall
        report): `goal` says what it asks."""
        return self._note(what, bool(met), f"{what}{detail}: {'met' if met else 'MISSED'} (goal: {goal})")

    def _note(self, what: str, met: bool, line: str) -> bool:
        self.checked.append(Goal(what, met, line))
        self.out(line)
        return met

    @property
    def missed(self) -> list[str]:
        return [g.what for g in self.checked if not g.met]

    @property
    def all_met(self) -> bool:
        return bool(self.checked) and not self.missed

    def exit_status(self) -> int:
        """Print the verdict over every goal checked; 0 when all were met, else 1."""
        if not self.checked:
            self.out("goals: MISSED: no goal was checked")
        elif self.missed:
            missed = "; ".join(what.strip() for what in self.missed)
            self.out(f"goals: MISSED {len(self.missed)} of {len(self.checked)}: {missed}")
        else:
            self.out(f"goals: met ({len(self.checked)} checked)")
        return 0 if self.all_met else 1


# --- trials as the sweep runs them ------------------------------------------------------------------


def spec_from(config: dict[str, Any], name: str = "bench", scale: float = 1.0) -> RunSpec:
    import yaml

    from loadtune.asked.config import load_config

    path = WORK / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **config}, sort_keys=False))
    return load_config(path, scale=scale)


def run_baseline(spec: RunSpec) -> tuple[Outcome, TrialStats | None]:
    """The spec's baseline, measured in its own process exactly as a sweep measures a trial."""
    import multiprocessing

    from loadtune.asked.plan import baseline_trial
    from loadtune.decide.stats import summarize
    from loadtune.sweep_process.launch import run_in_trial_process
    from loadtune.trial_process.jobs import TrialJob

    cfg = spec.config
    job = TrialJob(baseline_trial(cfg), cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir),
                   os.getpid(), multiprocessing.get_start_method())
    outcome = run_in_trial_process(job, cfg.measure.timeout_s)
    stats = summarize(outcome.result) if outcome.result else None
    return outcome, stats


def machine_line() -> str:
    from loadtune.measure.machine import cpu_model, usable_cores

    return (f"machine: {cpu_model()}, {usable_cores()} usable cores, Python {platform.python_version()}, "
            f"torch {__import__('torch').__version__}")
