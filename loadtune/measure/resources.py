"""What a trial's process tree uses while it is measured: CPU, memory, threads, reads, /dev/shm.

`TreeSampler` runs inside the trial process: a daemon thread reads the root process (the
trial's main process, whose threads include DataLoader's pin-memory thread) and every
descendant (the DataLoader workers) through psutil and /proc at a fixed low rate, with one
sample at `start()` and one at `stop()` so even a short window has two. It returns raw samples;
`resource_figures.summarize_resources` derives the figures from them, so a new figure never
needs a new run.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil  # type: ignore[import-untyped]

from loadtune.asked.trials import DEFAULT_PREFETCH
from loadtune.measure.procfs import descendant_pids
from loadtune.measure.resource_figures import BYTES_PER_MB
from loadtune.record.measurement import MEMORY_CPU_BUDGET, ProcessSample, ResourceSamples, Sample

Clock = Callable[[], float]

DEFAULT_INTERVAL_S = 0.2
# /dev/shm needed must fit this many times over in the free space: batch sizes vary,
# collate makes intermediate copies, and other processes use /dev/shm too.
SHM_SAFETY_MARGIN = 1.5

MEMORY_PSS = "pss"
MEMORY_USS = "uss"
IO_READ_BYTES = "read_bytes"  # bytes that came from storage (page-cache hits excluded)
IO_READ_CHARS = "read_chars"  # bytes returned by read() calls, whatever their source

_PROC = "/proc"


# --- sampling ----------------------------------------------------------------------------


def _smaps_rollup(pid: int) -> tuple[int, int | None] | None:
    """PSS and its file-backed part in bytes from /proc/PID/smaps_rollup; None when unreadable."""
    try:
        with open(f"{_PROC}/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields: dict[bytes, int] = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(b":")
        value = rest.split()
        if value and name in (b"Pss", b"Pss_File"):
            fields[name] = int(value[0]) * 1024
    if b"Pss" not in fields:
        return None
    return fields[b"Pss"], fields.get(b"Pss_File")


def _children_file_works(pid: int) -> bool:
    return os.path.exists(f"{_PROC}/{pid}/task/{pid}/children")


@dataclass(frozen=True)
class _Ways:
    """How this system lets a process tree be read: children from /proc (else psutil's scan of
    every process), memory from smaps_rollup (else psutil), which memory figure (pss or uss)
    and which read counter (None: no reads)."""

    procfs: bool
    rollup: bool
    memory_metric: str
    io_metric: str | None

    @classmethod
    def of(cls, root: psutil.Process) -> _Ways:
        rollup = _smaps_rollup(root.pid) is not None
        if rollup:
            memory_metric = MEMORY_PSS
        else:
            memory_metric = MEMORY_PSS if hasattr(root.memory_full_info(), "pss") else MEMORY_USS
        return cls(_children_file_works(root.pid), rollup, memory_metric, _probe_io(root))


def _probe_io(root: psutil.Process) -> str | None:
    try:
        io = root.io_counters()
    except (psutil.Error, NotImplementedError, AttributeError, OSError, RuntimeError, ValueError):
        return None
    if hasattr(io, "read_bytes"):
        return IO_READ_BYTES
    return IO_READ_CHARS if hasattr(io, "read_chars") else None


class TreeSampler:
    """Samples the process tree under `root_pid` on a daemon thread every `interval_s`.

    `start()` takes the first sample in the caller's thread, `stop()` the last one, and
    returns the `ResourceSamples`. As a context manager, the result is in `.result` after
    the block. Only the constructor raises (psutil.NoSuchProcess for a pid that is not
    there); afterwards, failures to read one process skip that process (or that figure),
    and the sampler never raises into the measured loop. If the root itself ends, sampling
    stops with what it has.
    """

    def __init__(self, root_pid: int, interval_s: float = DEFAULT_INTERVAL_S, clock: Clock = time.monotonic,
                 memory_cpu_budget: float = MEMORY_CPU_BUDGET, main_pids: tuple[int, ...] = ()) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s!r}")
        if memory_cpu_budget <= 0:
            raise ValueError(f"memory_cpu_budget must be positive, not {memory_cpu_budget!r}")
        self.main_pids = tuple(main_pids)
        self.interval_s = interval_s
        self.memory_cpu_budget = memory_cpu_budget
        self._clock = clock
        self._memory_due = 0.0
        self._root = psutil.Process(root_pid)
        self._samples: list[Sample] = []
        self._cost_s = 0.0
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.ways = _Ways.of(self._root)
        self.result: ResourceSamples | None = None

    @property
    def root_pid(self) -> int:
        pid: int = self._root.pid
        return pid

    # -- life cycle --

    def start(self, memory: bool = False, after_mains: Callable[[], None] | None = None) -> "TreeSampler":
        """Take the first sample and start the thread. Without `memory` the first sample is
        CPU, threads and reads (well under a millisecond) and the thread's first act is to read
        memory, so the caller is not held up; with it, the first sample reads memory too (tens
        of ms), for a caller that samples another process before that process starts its work.
        `after_mains` is called once the main processes (the root, and main_pids) are read,
        before the other descendants: a caller that must not run its loop while a main
        process's memory map is read can go on from there."""
        if self._thread is not None or self.result is not None:
            raise RuntimeError("a TreeSampler runs once")
        self._sample(memory=memory, after_mains=after_mains)  # with memory, it also sets when memory is read next
        self._thread = threading.Thread(target=self._run, args=(not memory,), name="loadtune-tree-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ResourceSamples:
        """Take the last sample, memory included (tens of ms with workers), and return all."""
        if self.result is not None:
            return self.result
        if self._thread is None:
            raise RuntimeError("stop() before start()")
        self._halt.set()
        self._thread.join()
        self._sample(memory=True, root_last=True)
        self.result = ResourceSamples(
            root_pid=self.root_pid,
            samples=tuple(self._samples),
            memory_metric=self.ways.memory_metric,
            io_metric=self.ways.io_metric,
            interval_s=self.interval_s,
            sampler_cpu_s=self._cost_s,
            memory_cpu_budget=self.memory_cpu_budget,
            in_root=self.root_pid == os.getpid(),
            main_pids=self.main_pids,
        )
        return self.result

    def __enter__(self) -> "TreeSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, memory_first: bool = True) -> None:
        next_t = self._clock() + self.interval_s
        if memory_first and not self._sample(memory=True):
            return
        while not self._halt.wait(max(0.0, next_t - self._clock())):
            if not self._sample(memory=self._clock() >= self._memory_due):
                return  # the root is gone: nothing more to see
            next_t += self.interval_s
            now = self._clock()
            if next_t < now:  # a sample overran: keep the rate, skip the missed ticks
                next_t = now + self.interval_s

    # -- one sample --

    def _sample(self, memory: bool, root_last: bool = False, after_mains: Callable[[], None] | None = None) -> bool:
        """Take one sample; False when the root cannot be read. Its CPU cost is added up.

        Memory is read when asked (the thread asks when the memory CPU budget allows). The root is read
        first, or last for the final sample, and the sample's time is that of the root's
        reading: so the sampler's own CPU always falls between the first and the last
        reading of the root, and summarize_resources can take all of it off the main process.
        Other main processes (main_pids) are read before the remaining descendants, and then
        `after_mains` is called (even when the root cannot be read).
        """
        c0 = time.thread_time()
        try:
            if not root_last:
                t_s, root = self._clock(), self._read(self._root, memory)
                if root is None:
                    return False
            pids = self._descendants()
            descendants = self._read_pids([p for p in pids if p in self.main_pids], memory)
            if after_mains is not None:
                after_mains()
                after_mains = None
            descendants += self._read_pids([p for p in pids if p not in self.main_pids], memory)
            if root_last:
                t_s, root = self._clock(), self._read(self._root, memory)
            if root is None:
                return False
            self._samples.append(Sample(t_s=t_s, processes=(root, *descendants), memory=memory))
            if memory:
                spent = time.thread_time() - c0
                self._memory_due = self._clock() + spent / self.memory_cpu_budget
            return True
        except Exception:  # noqa: BLE001 - a sampling failure must never break the trial
            return False
        finally:
            if after_mains is not None:
                try:
                    after_mains()
                except Exception:  # noqa: BLE001 - the caller's note must not break sampling
                    pass
            self._cost_s += time.thread_time() - c0

    def _read_pids(self, pids: list[int], memory: bool) -> list[ProcessSample]:
        found = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)  # afresh each time: a reused pid is another process
            except psutil.Error:
                continue
            seen = self._read(proc, memory)
            if seen is not None:
                found.append(seen)
        return found

    def _descendants(self) -> list[int]:
        if not self.ways.procfs:
            try:
                return [p.pid for p in self._root.children(recursive=True)]
            except psutil.Error:
                return []
        return descendant_pids(self.root_pid)

    def _read(self, proc: psutil.Process, memory: bool) -> ProcessSample | None:
        try:
            with proc.oneshot():
                cpu = proc.cpu_times()
                ppid = proc.ppid()
                zombie = proc.status() == psutil.STATUS_ZOMBIE
                threads = None if zombie else proc.num_threads()
                started = proc.create_time()
        except psutil.Error:
            return None
        mem: int | None = None
        mem_file: int | None = None
        if memory and not zombie:
            if self.ways.rollup:
                mem, mem_file = _smaps_rollup(proc.pid) or (None, None)
            else:
                try:
                    mem = int(getattr(proc.memory_full_info(), self.ways.memory_metric))
                except (psutil.Error, AttributeError, OSError):
                    pass
        read: int | None = None
        if self.ways.io_metric is not None:
            try:
                read = int(getattr(proc.io_counters(), self.ways.io_metric))
            except (psutil.Error, NotImplementedError, AttributeError, OSError, RuntimeError, ValueError):
                pass
        children = getattr(cpu, "children_user", 0.0) + getattr(cpu, "children_system", 0.0)
        return ProcessSample(
            pid=proc.pid,
            ppid=ppid,
            started=started,
            cpu_s=cpu.user + cpu.system,
            children_cpu_s=children,
            pss_bytes=mem,
            num_threads=threads,
            read_bytes=read,
            pss_file_bytes=mem_file,
        )


# --- batches and /dev/shm ----------------------------------------------------------------


def shm_need_mb(batch_bytes: int, num_workers: int, prefetch_factor: int | None) -> float:
    """/dev/shm held by batches in flight: workers put each finished batch in shared memory.

    Up to num_workers × prefetch_factor batches are asked for at once (finished ones wait in
    the queue), plus one per worker being built; prefetch_factor None means DataLoader's
    default of 2. Without workers batches never go through shared memory: 0.
    """
    if num_workers <= 0:
        return 0.0
    prefetch = DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor
    return batch_bytes * num_workers * (prefetch + 1) / BYTES_PER_MB


def shm_fits(need_mb: float, free_mb: float, margin: float = SHM_SAFETY_MARGIN) -> bool:
    """Whether `need_mb` fits `margin` times over in `free_mb` of /dev/shm.

    A batch that does not fit kills its worker with SIGBUS ("bus error"); Docker's default
    /dev/shm is 64 MB. machine.shm_free_gb() × 1024 gives free_mb.
    """
    return need_mb * margin <= free_mb

