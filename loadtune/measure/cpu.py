"""CPU used by this process and its workers, read at the edges of a counted window from inside
the trial: the exact window, not the sampler's span (which also holds the warm-up's and the
teardown's idle moments). Each thread's run time comes from /proc/PID/task/TID/schedstat, in
nanoseconds; the machine's busy time from /proc/stat, in clock ticks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from loadtune.measure.procfs import descendant_pids
from loadtune.record.measurement import CpuWindow

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


def _usable_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, when the kernel's per-CPU counts describe them: None
    under a cgroup CPU quota (its share of the CPUs is not a set of them)."""
    from loadtune.measure.machine import cpu_quota

    if hasattr(os, "sched_getaffinity"):
        cpus = frozenset(os.sched_getaffinity(0))
    else:
        cpus = frozenset(range(os.cpu_count() or 1))
    quota = cpu_quota()
    return None if quota is not None and quota < len(cpus) else cpus


_CPUS: frozenset[int] | None = None


def machine_busy() -> tuple[float | None, int | None]:
    """CPU-seconds the CPUs this process may use have been busy, by any process, and how many
    they are: from the per-CPU lines of /proc/stat."""
    global _CPUS
    if _CPUS is None:
        _CPUS = _usable_cpus() or frozenset()
    if not _CPUS:
        return None, None
    try:
        with open(f"{_PROC}/stat", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    busy, seen = 0, 0
    for line in lines[1:]:
        name, _, rest = line.partition(b" ")
        if not name.startswith(b"cpu"):
            break
        if int(name[3:]) in _CPUS:
            fields = [int(x) for x in rest.split()[:8]]  # user nice system idle iowait irq softirq steal
            busy += sum(fields) - fields[3] - fields[4]
            seen += 1
    return (busy * _TICK_S, seen) if seen else (None, None)


def read_cpu() -> CpuReading:
    """This process tree's CPU so far, and the machine's."""
    me = os.getpid()
    main = time.process_time()
    reaped = os.times()
    workers = reaped.children_user + reaped.children_system
    for pid in descendant_pids(me):
        used = _tasks_cpu_s(pid)
        workers += used or 0.0
    busy, cpus = machine_busy()
    return CpuReading(time.perf_counter(), main, workers, busy, cpus)


def window_between(start: CpuReading, end: CpuReading) -> CpuWindow:
    """The CPU used between two readings (a worker that ended unreaped is lost: never below 0)."""
    busy = None
    if start.machine_busy_s is not None and end.machine_busy_s is not None:
        busy = max(0.0, end.machine_busy_s - start.machine_busy_s)
    return CpuWindow(wall_s=end.t_s - start.t_s, main_cpu_s=max(0.0, end.main_cpu_s - start.main_cpu_s),
                     workers_cpu_s=max(0.0, end.workers_cpu_s - start.workers_cpu_s), machine_busy_s=busy,
                     machine_cpus=end.machine_cpus)


def cpu_outside_share(cpu: CpuWindow, usable_cores: float) -> float | None:
    """The share of the usable cores that processes other than the measured tree used over `cpu`'s
    stretch (None where the machine's count is not known: under a CPU quota)."""
    if cpu.machine_busy_s is None or cpu.wall_s <= 0 or usable_cores <= 0:
        return None
    return max(0.0, cpu.machine_busy_s - cpu.main_cpu_s - cpu.workers_cpu_s) / cpu.wall_s / usable_cores


def outside_since(usable_cores: float) -> Callable[[], float | None]:
    """Read this process tree's CPU and the machine's now; the function returned, called later,
    gives the share of the usable cores that other processes used in between."""
    start = read_cpu()
    return lambda: cpu_outside_share(window_between(start, read_cpu()), usable_cores)
