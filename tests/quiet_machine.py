"""A quiet machine for tests that assert measured figures (marked serial): they wait for other
processes to leave the cores, and fail naming what kept them busy when the cores never quieten."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

import psutil  # type: ignore[import-untyped]
import pytest

# The share of the usable cores other processes may take while figures are measured (the
# default of measure.max_outside_cpu).
QUIET_SHARE = 0.25
# How long a test waits for a quiet machine before it fails.
QUIET_WAIT_S = 60.0
# One reading of the machine's load lasts this long.
READING_S = 1.0
BUSIEST_SHOWN = 3
# Measured this many times at most while other processes disturb every repeat of a measurement.
QUIET_ATTEMPTS = 2

Measured = TypeVar("Measured")


@dataclass(frozen=True)
class Load:
    """What other processes used of the usable cores over one reading."""

    share: float  # of the usable cores, all processes but this one
    cores: int
    busiest: tuple[tuple[str, int, float], ...]  # name, pid, cores used

    def __str__(self) -> str:
        text = f"other processes used {self.share:.0%} of the {self.cores} usable cores"
        if self.busiest:
            text += "; busiest: " + ", ".join(f"{name} (pid {pid}) {used:.0%} of a core"
                                             for name, pid, used in self.busiest)
        return text


def _usable_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(psutil.cpu_count() or 1))


def _cpu_s(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def read_load(reading_s: float = READING_S) -> Load:
    """The usable cores' use over `reading_s` (this process sleeps through it), and the processes
    that used the most."""
    cpus = _usable_cpus()
    procs = [p for p in psutil.process_iter(["name"]) if p.pid != os.getpid()]
    before = [(p, _cpu_s(p)) for p in procs]
    psutil.cpu_percent(percpu=True)  # the reading starts here
    time.sleep(reading_s)
    per_cpu = psutil.cpu_percent(percpu=True)
    share = sum(per_cpu[i] for i in cpus if i < len(per_cpu)) / (100.0 * len(cpus))
    used = []
    for proc, start in before:
        end = _cpu_s(proc)
        if start is not None and end is not None and end > start:
            used.append((proc.info["name"] or "?", proc.pid, (end - start) / reading_s))
    used.sort(key=lambda u: u[2], reverse=True)
    return Load(share, len(cpus), tuple(used[:BUSIEST_SHOWN]))


def wait_for_quiet(most: float = QUIET_SHARE, wait_s: float = QUIET_WAIT_S) -> Load:
    """Read the load again and again until other processes take at most `most` of the usable
    cores; fail with the last reading when `wait_s` passes first."""
    deadline = time.monotonic() + wait_s
    while True:
        load = read_load()
        if load.share <= most:
            return load
        if time.monotonic() >= deadline:
            pytest.fail(f"the machine did not quieten within {wait_s:.0f} s (other processes may use at most "
                        f"{most:.0%} of the cores): {load}", pytrace=False)


def measured_quietly(measure: Callable[[int], Measured], outside_cpu: Callable[[Measured], float],
                     most: float = QUIET_SHARE) -> Measured:
    """`measure(attempt)`, whose figures describe the trial alone only when other processes took at
    most `most` of the cores (`outside_cpu` of what it measured: the largest share over its
    windows). Measured again after a wait for a quiet machine when they took more; fails naming
    what is busy when they did each of QUIET_ATTEMPTS times."""
    for attempt in range(QUIET_ATTEMPTS):
        if attempt:
            wait_for_quiet(most)
        measured = measure(attempt)
        share = outside_cpu(measured)
        if share <= most:
            return measured
    pytest.fail(f"other processes used {share:.0%} of the cores through every repeat, measured again up to twice, "
                f"in each of {QUIET_ATTEMPTS} sweeps; now: {read_load()}", pytrace=False)
