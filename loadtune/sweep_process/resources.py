"""What a trial's process tree uses while it is measured: CPU, memory, threads, reads, /dev/shm.

`TreeSampler` runs inside the trial process: a daemon thread reads the root process (the
trial's main process, whose threads include DataLoader's pin-memory thread) and every
descendant (the DataLoader workers) through psutil and /proc at a fixed low rate, with one
sample at `start()` and one at `stop()` so even a short window has two. It returns raw samples;
`summarize_resources` derives the figures from them, so a new figure never needs a new run.

CPU is cumulative per process. A worker that exits keeps what it was seen to use, and once
its parent reaps it (DataLoader joins its workers at each epoch end without
persistent_workers) the parent's cumulative children time adds the part between its last
sample and its exit, so short-lived workers are not undercounted. Linux adds a reaped
child's reads to its parent's read counter the same way, and that is handled the same way.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import psutil  # type: ignore[import-untyped]

from loadtune.measurement import MEMORY_CPU_BUDGET, ProcessSample, ResourceSamples, Sample
from loadtune.trials import DEFAULT_PREFETCH

Clock = Callable[[], float]

DEFAULT_INTERVAL_S = 0.2
BYTES_PER_MB = 1024**2
# /dev/shm needed must fit this many times over in the free space: batch sizes vary,
# collate makes intermediate copies, and other processes use /dev/shm too.
SHM_SAFETY_MARGIN = 1.5

MEMORY_PSS = "pss"
MEMORY_USS = "uss"
IO_READ_BYTES = "read_bytes"  # bytes that came from storage (page-cache hits excluded)
IO_READ_CHARS = "read_chars"  # bytes returned by read() calls, whatever their source

_PROC = "/proc"


@dataclass(frozen=True)
class ResourceFigures:
    """Figures of one window. Utilisations are CPU seconds / wall seconds / usable cores, so
    `cpu_util` = `main_cpu_util` + `workers_cpu_util` and 1.0 means every usable core busy.
    The main process's figures leave out the sampler's own CPU."""

    wall_s: float
    cpu_util: float
    main_cpu_util: float  # the root process: training step, pin-memory thread, collation without workers
    workers_cpu_util: float  # every descendant: DataLoader workers (and anything they start)
    main_cpu_s: float
    workers_cpu_s: float
    peak_pss_mb: float  # max over the samples that read memory of the tree's summed PSS
    memory_metric: str  # "pss" or "uss": what the *_pss_* figures hold
    # Growth leaves file-backed pages out where the kernel reports them (Pss_File): a shared
    # library's share moves whenever any other process maps or unmaps it, by tens of MB for
    # torch, while copy-on-read and leaks grow anonymous memory.
    pss_growth_mb: float  # tree PSS at the last sample minus at the first
    worker_pss_mb: float | None  # mean per worker at the last memory sample that has workers
    worker_pss_growth_mb: float | None  # mean per worker, between its first and last memory sample
    read_mb: float | None  # read by the tree over the window (see io_metric); None when unavailable
    io_metric: str | None
    threads_per_worker: float | None  # mean num_threads over workers and samples
    workers: int  # distinct worker processes seen (restarted workers count again)
    peak_workers: int  # most workers alive at one sample
    sampler_load: float  # the sampler's CPU seconds per wall second (fraction of one core)


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


def _child_pids_procfs(pid: int) -> list[int]:
    """Children of `pid` from /proc/PID/task/TID/children: reads a few small files instead of
    every process's stat file, which is what psutil's children() does."""
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return found


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
        self.root_pid = root_pid
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
        self._use_procfs = _children_file_works(root_pid)
        self._use_rollup = _smaps_rollup(root_pid) is not None
        if self._use_rollup:
            self.memory_metric = MEMORY_PSS
        else:
            self.memory_metric = MEMORY_PSS if hasattr(self._root.memory_full_info(), "pss") else MEMORY_USS
        self.io_metric = self._probe_io()
        self.result: ResourceSamples | None = None

    def _probe_io(self) -> str | None:
        try:
            io = self._root.io_counters()
        except (psutil.Error, NotImplementedError, AttributeError, OSError, RuntimeError, ValueError):
            return None
        if hasattr(io, "read_bytes"):
            return IO_READ_BYTES
        return IO_READ_CHARS if hasattr(io, "read_chars") else None

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
            memory_metric=self.memory_metric,
            io_metric=self.io_metric,
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
        if not self._use_procfs:
            try:
                return [p.pid for p in self._root.children(recursive=True)]
            except psutil.Error:
                return []
        found: list[int] = []
        frontier = [self.root_pid]
        while frontier:
            kids = [kid for pid in frontier for kid in _child_pids_procfs(pid)]
            found.extend(kids)
            frontier = kids
        return found

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
            if self._use_rollup:
                mem, mem_file = _smaps_rollup(proc.pid) or (None, None)
            else:
                try:
                    mem = int(getattr(proc.memory_full_info(), self.memory_metric))
                except (psutil.Error, AttributeError, OSError):
                    pass
        read: int | None = None
        if self.io_metric is not None:
            try:
                read = int(getattr(proc.io_counters(), self.io_metric))
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


# --- figures -----------------------------------------------------------------------------


def _cumulative_use(samples: tuple[Sample, ...], root_pid: int,
                    mains: frozenset[int] = frozenset()) -> tuple[float, float, int | None]:
    """CPU of the main processes (the root, and any of `mains`), CPU of the other descendants,
    and bytes read by the tree over the window (None unless the root's reads were read at the
    first and last sample). See _Tally for how processes that come and go are counted.
    """
    first = samples[0]
    tally = _Tally(first)
    for sample in samples[1:]:
        current = {p.key: p for p in sample.processes}
        tally.hold_vanished(current, {p.pid: p.key for p in sample.processes})
        for key, proc in current.items():
            tally.add(key, proc, main=proc.pid == root_pid or proc.pid in mains)
    root_reads = [next((p.read_bytes for p in s.processes if p.pid == root_pid), None) for s in (first, samples[-1])]
    return tally.main_cpu, tally.workers_cpu, (tally.read if None not in root_reads else None)


class _Tally:
    """The tree's CPU and reads, sample by sample.

    Per process, only increases of its cumulative counters count (a counter read lower,
    as a dying process may report, changes nothing). A process first seen after the first
    sample counts in full. A vanished process keeps what it was seen to use; the credit it
    was given is held against the reaped-children counter of its nearest ancestor still
    present, so when that ancestor reaps it, only the part not yet seen is added.
    """

    def __init__(self, first: Sample) -> None:
        # Per process (by key): the highest cumulative counters seen.
        self.best_cpu = {p.key: p.cpu_s for p in first.processes}
        self.best_children = {p.key: p.children_cpu_s for p in first.processes}
        self.best_read = {p.key: p.read_bytes for p in first.processes if p.read_bytes is not None}
        # Per ancestor: what its vanished descendants were credited, not yet seen in its reaped counters.
        self.pending_cpu: dict[tuple[int, float], float] = {}
        self.pending_read: dict[tuple[int, float], int] = {}
        self.last_seen = {p.key: p for p in first.processes}
        self.gone: set[tuple[int, float]] = set()
        self.main_cpu = self.workers_cpu = 0.0
        self.read = 0

    def hold_vanished(self, current: Mapping[tuple[int, float], ProcessSample],
                      by_pid: Mapping[int, tuple[int, float]]) -> None:
        """Hold the credit of each process gone since the last sample against its nearest
        ancestor in `current`."""
        for key, was in self.last_seen.items():
            if key in current or key in self.gone:
                continue
            self.gone.add(key)
            ancestor = _present_ancestor(was, self.last_seen, by_pid)
            if ancestor is not None:
                self.pending_cpu[ancestor] = self.pending_cpu.get(ancestor, 0.0) + self.best_cpu[key] + \
                    self.best_children[key]
                if key in self.best_read:
                    self.pending_read[ancestor] = self.pending_read.get(ancestor, 0) + self.best_read[key]

    def add(self, key: tuple[int, float], proc: ProcessSample, main: bool) -> None:
        """Count what one process of the current sample used since it was last seen."""
        self.gone.discard(key)
        own = max(0.0, proc.cpu_s - self.best_cpu.get(key, 0.0))
        reaped = max(0.0, proc.children_cpu_s - self.best_children.get(key, 0.0))
        held = self.pending_cpu.get(key, 0.0)
        self.pending_cpu[key] = max(0.0, held - reaped)
        reaped = max(0.0, reaped - held)
        if main:
            self.main_cpu += own
            self.workers_cpu += reaped
        else:
            self.workers_cpu += own + reaped
        self.best_cpu[key] = max(self.best_cpu.get(key, 0.0), proc.cpu_s)
        self.best_children[key] = max(self.best_children.get(key, 0.0), proc.children_cpu_s)
        if proc.read_bytes is not None:
            grew = max(0, proc.read_bytes - self.best_read.get(key, 0))
            held_read = self.pending_read.get(key, 0)
            self.pending_read[key] = max(0, held_read - grew)
            self.read += max(0, grew - held_read)
            self.best_read[key] = max(self.best_read.get(key, 0), proc.read_bytes)
        self.last_seen[key] = proc


def _present_ancestor(proc: ProcessSample, known: Mapping[tuple[int, float], ProcessSample],
                      present: Mapping[int, tuple[int, float]]) -> tuple[int, float] | None:
    """The nearest ancestor of `proc` in the current sample, walking parents last seen."""
    by_pid = {p.pid: p for p in known.values()}
    seen = {proc.pid}
    pid = proc.ppid
    while pid not in seen:
        if pid in present:
            return present[pid]
        parent = by_pid.get(pid)
        if parent is None:
            return None
        seen.add(pid)
        pid = parent.ppid
    return None


def _growing(p: ProcessSample) -> int | None:
    """The memory whose growth means something: PSS without its file-backed part when known."""
    if p.pss_bytes is None:
        return None
    return p.pss_bytes - (p.pss_file_bytes or 0)


def summarize_resources(samples: ResourceSamples, usable_cores: float) -> ResourceFigures:
    """Figures of the sampled window; needs at least two samples at different times.

    `usable_cores` divides every utilisation: pass machine.usable_cores(), or the cgroup
    quota when it is lower (a float such as 1.5 is fine).
    """
    taken = samples.samples
    if len(taken) < 2 or taken[-1].t_s <= taken[0].t_s:
        raise ValueError("summarize_resources needs at least two samples over a positive time span")
    if usable_cores <= 0:
        raise ValueError(f"usable_cores must be positive, not {usable_cores!r}")
    wall_s = taken[-1].t_s - taken[0].t_s
    main_cpu_s, workers_cpu_s, read = _cumulative_use(taken, samples.root_pid, samples.mains)
    if samples.in_root:
        main_cpu_s = max(0.0, main_cpu_s - samples.sampler_cpu_s)  # the sampler is a thread of the root

    def util(cpu_s: float) -> float:
        return cpu_s / wall_s / usable_cores

    with_memory_read = [s for s in taken if s.memory] or [taken[0], taken[-1]]
    tree_pss = [sum(p.pss_bytes or 0 for p in s.processes) for s in with_memory_read]
    tree_growing = [sum(_growing(p) or 0 for p in s.processes) for s in with_memory_read]
    workers = _Workers.of(taken, samples.mains)
    return ResourceFigures(
        wall_s=wall_s,
        cpu_util=util(main_cpu_s + workers_cpu_s),
        main_cpu_util=util(main_cpu_s),
        workers_cpu_util=util(workers_cpu_s),
        main_cpu_s=main_cpu_s,
        workers_cpu_s=workers_cpu_s,
        peak_pss_mb=max(tree_pss) / BYTES_PER_MB,
        memory_metric=samples.memory_metric,
        pss_growth_mb=(tree_growing[-1] - tree_growing[0]) / BYTES_PER_MB,
        worker_pss_mb=_mean(workers.last_pss) / BYTES_PER_MB if workers.last_pss else None,
        worker_pss_growth_mb=_mean(workers.growths) / BYTES_PER_MB if workers.growths else None,
        read_mb=read / BYTES_PER_MB if read is not None and samples.io_metric is not None else None,
        io_metric=samples.io_metric,
        threads_per_worker=_mean(workers.threads) if workers.threads else None,
        workers=workers.seen,
        peak_workers=workers.peak,
        sampler_load=samples.sampler_cpu_s / wall_s,
    )


def _mean(values: list[int]) -> float:
    return sum(values) / len(values)


@dataclass(frozen=True)
class _Workers:
    """What the samples show of the workers (every process but the main ones)."""

    seen: int  # distinct worker processes (restarted workers count again)
    peak: int  # most alive at one sample
    threads: list[int]  # num_threads of each worker at each sample
    last_pss: list[int]  # each worker's memory at the last memory sample that has workers
    growths: list[int]  # each worker's growing memory, between its first and last memory sample

    @classmethod
    def of(cls, taken: tuple[Sample, ...], mains: frozenset[int]) -> _Workers:
        memory: dict[tuple[int, float], list[int]] = {}
        threads: list[int] = []
        seen: set[tuple[int, float]] = set()
        peak = 0
        last_pss: list[int] = []
        for s in taken:
            workers = [p for p in s.processes if p.pid not in mains]
            seen.update(p.key for p in workers)
            peak = max(peak, sum(1 for p in workers if p.num_threads is not None))
            threads.extend(p.num_threads for p in workers if p.num_threads is not None)
            if not s.memory:
                continue
            with_memory = [p for p in workers if p.pss_bytes is not None]
            for p in with_memory:
                memory.setdefault(p.key, []).append(_growing(p))  # type: ignore[arg-type]
            if with_memory:
                last_pss = [p.pss_bytes for p in with_memory]  # type: ignore[misc]
        growths = [m[-1] - m[0] for m in memory.values() if len(m) >= 2]
        return cls(len(seen), peak, threads, last_pss, growths)


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

