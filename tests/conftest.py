from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from types import ModuleType

import psutil
import pytest
import yaml

MARKER_VAR = "LOADTUNE_TEST_MARKER"


@pytest.fixture
def write_config(tmp_path: Path):
    """Write a config (dict or YAML text) into tmp_path and return its path."""

    def write(content, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        path.write_text(textwrap.dedent(text))
        return path

    return write


# measure.max_outside_cpu for sweeps whose figures no assertion rests on: above any share of the
# cores other processes can take, so no repeat is measured again. A sweep measures a repeat
# again (twice at most) when other processes took more than 0.25 of the cores during it: what
# figures need, but beside another test (make test runs two at a time) nearly every repeat is
# disturbed, and such a sweep would run most of its trials three times for nothing.
ANY_LOAD = 100.0


def tiny_config(figures: bool = False, **changes) -> dict:
    """A real but fast sweep: 3 ms sleep per sample, batch 8, 5 ms sleep step, short windows.

    Model (facts note): W=0 -> 24/29 = 0.828; W>=1 -> 1 - W*5/24: W=1 0.792, W=2 0.583.

    `figures`: the test asserts measured figures (a verdict, a bound on a throughput, the model's
    fit), so repeats other processes disturbed are measured again, as in a user's sweep (the
    config's own measure.max_outside_cpu, or the default). Otherwise each repeat counts as it
    comes (ANY_LOAD).
    """
    config = {
        "name": "tiny",
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": 400, "cost_s": 0.003}, "scale_kwarg": "num_samples"},
        "loader": {"batch_size": 8, "num_workers": 1, "prefetch_factor": 2},
        "sweep": {"num_workers": [0, 2], "pin_memory": [True]},
        "step": {"sleep_s": 0.005},
        "measure": {"warmup_batches": 2, "warmup_batches_per_worker": 0, "batches": 10, "repeats": 2,
                    "timeout_s": 60},
        "device": "cpu",
    }
    for key, value in changes.items():
        config[key] = value
    if not figures:
        config["measure"] = {"max_outside_cpu": ANY_LOAD, **config["measure"]}
    return config


def wait_until(condition, timeout_s: float = 10.0, every_s: float = 0.02) -> bool:
    """Poll `condition()` every `every_s` until it is true (True) or `timeout_s` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)


def run_cli(*args: str, cwd: Path | None = None, marker: str | None = None, timeout: float = 240,
            ) -> subprocess.CompletedProcess:
    """Run `python -m loadtune ARGS` as a user would: a real process, real exit code."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    if marker:
        env[MARKER_VAR] = marker
    return subprocess.run([sys.executable, "-m", "loadtune", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes started under `marker` (workers and trial processes inherit the environment)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(MARKER_VAR) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def marker(request) -> str:
    """A unique environment mark for the processes of one test; asserts none outlive it."""
    mark = f"{request.node.name}-{uuid.uuid4().hex[:8]}"
    yield mark
    deadline = time.monotonic() + 5
    while processes_with(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_with(mark)
    assert not left, f"processes left running: {[(p.pid, p.name()) for p in left]}"


def fake_setup(spec, context=None, cores: float = 2.0, **info):
    """A sweep's setup without preflight or reading the machine: for runners driven by fake trials."""
    from loadtune.sweep_process.setup import Setup
    from loadtune.trial_process.jobs import PreflightInfo

    return Setup(spec, PreflightInfo(**info), "cpu", int(cores), cores, 1, None,
                 {"config_name": "tiny", "host": "here", **(context or {})})


def fake_runner(spec, out_path, execute, **info):
    """A Racer over fake trials (`execute`), writing its CSV at `out_path`."""
    from loadtune.sweep_process.files import SweepFiles
    from loadtune.sweep_process.racer import Racer

    files = SweepFiles.open(out_path, spec, "here", resume=False)
    return Racer(fake_setup(spec, **info), files, execute=execute)


BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    """Import a benchmark script as a module (the benchmarks folder on sys.path, as when it runs)."""
    monkeypatch.syspath_prepend(str(BENCH))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    return load
