"""Shared by the benchmark scripts: configs written to real files, trials run as the sweep runs them."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from loadtune.config import RunSpec, load_config
from loadtune.machine import cpu_model, usable_cores
from loadtune.sweep_process.launch import Outcome, run_in_trial_process
from loadtune.sweep_process.plan import baseline_trial
from loadtune.sweep_process.stats import TrialStats, summarize
from loadtune.trial_process.jobs import TrialJob

WORK = Path(tempfile.mkdtemp(prefix="loadtune-bench-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)


def spec_from(config: dict[str, Any], name: str = "bench", scale: float = 1.0) -> RunSpec:
    path = WORK / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **config}, sort_keys=False))
    return load_config(path, scale=scale)


def run_baseline(spec: RunSpec) -> tuple[Outcome, TrialStats | None]:
    """The spec's baseline, measured in its own process exactly as a sweep measures a trial."""
    cfg = spec.config
    job = TrialJob(baseline_trial(cfg), cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir),
                   os.getpid(), multiprocessing.get_start_method())
    outcome = run_in_trial_process(job, cfg.measure.timeout_s)
    stats = summarize(outcome.result) if outcome.result else None
    return outcome, stats


def machine_line() -> str:
    return (f"machine: {cpu_model()}, {usable_cores()} usable cores, Python {platform.python_version()}, "
            f"torch {__import__('torch').__version__}")
