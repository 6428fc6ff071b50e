"""CPU used by this process and its workers, read at the edges of a counted window from inside
the trial: the exact window, not the sampler's span (which also holds the warm-up's and the
teardown's idle moments). Each thread's run time comes from /proc/PID/task/TID/schedstat, in
nanoseconds; the machine's busy time from /proc/stat, in clock ticks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from loadtune.measurement import CpuWindow

_PROC = "/proc"
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class CpuReading:
    t_s: float  # perf_counter
    main_cpu_s: float  # this process, all its threads
    workers_cpu_s: float  # its descendants alive now, plus those it has reaped
    machine_busy_s: float | None  # every process on the machine: CPU-seconds not idle
    machine_cpus: int | None


def _tasks_cpu_s(pid: int) -> float | None:
    """Run time of every thread of `pid`, in seconds; None when the process is gone."""
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return None
    total = 0
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile: the process's own counters still hold it
    return total / 1e9


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        frontier = [kid for p in frontier for kid in _children(p)]
        found.extend(frontier)
    return found


def _machine_busy() -> tuple[float | None, int | None]:
    """CPU-seconds the whole machine has been busy (all CPUs), and how many CPUs /proc/stat lists."""
    try:
        with open(f"{_PROC}/stat", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    fields = [int(x) for x in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    cpus = sum(1 for line in lines[1:] if line.startswith(b"cpu"))
    return (sum(fields) - idle) * _TICK_S, cpus or None


def read_cpu() -> CpuReading:
    """This process tree's CPU so far, and the machine's."""
    me = os.getpid()
    main = time.process_time()
    reaped = os.times()
    workers = reaped.children_user + reaped.children_system
    for pid in _descendants(me):
        used = _tasks_cpu_s(pid)
        workers += used or 0.0
    busy, cpus = _machine_busy()
    return CpuReading(time.perf_counter(), main, workers, busy, cpus)


def window_between(start: CpuReading, end: CpuReading) -> CpuWindow:
    """The CPU used between two readings (a worker that ended unreaped is lost: never below 0)."""
    busy = None
    if start.machine_busy_s is not None and end.machine_busy_s is not None:
        busy = max(0.0, end.machine_busy_s - start.machine_busy_s)
    return CpuWindow(wall_s=end.t_s - start.t_s, main_cpu_s=max(0.0, end.main_cpu_s - start.main_cpu_s),
                     workers_cpu_s=max(0.0, end.workers_cpu_s - start.workers_cpu_s), machine_busy_s=busy,
                     machine_cpus=end.machine_cpus)
