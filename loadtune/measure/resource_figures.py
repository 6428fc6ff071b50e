"""The figures of a trial's process tree over a window, derived from a TreeSampler's raw samples.

CPU is cumulative per process. A worker that exits keeps what it was seen to use, and once
its parent reaps it (DataLoader joins its workers at each epoch end without
persistent_workers) the parent's cumulative children time adds the part between its last
sample and its exit, so short-lived workers are not undercounted. Linux adds a reaped
child's reads to its parent's read counter the same way, and that is handled the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from loadtune.record.measurement import ProcessSample, ResourceSamples, Sample

BYTES_PER_MB = 1024**2


@dataclass(frozen=True)
class CpuUse:
    """CPU of the tree over a window. Utilisations are CPU seconds / wall seconds / usable cores,
    so `cpu_util` = `main_cpu_util` + `workers_cpu_util` and 1.0 means every usable core busy.
    The main process's figures leave out the sampler's own CPU."""

    wall_s: float
    cpu_util: float
    main_cpu_util: float  # the root process: training step, pin-memory thread, collation without workers
    workers_cpu_util: float  # every descendant: DataLoader workers (and anything they start)
    main_cpu_s: float
    workers_cpu_s: float


@dataclass(frozen=True)
class MemoryUse:
    """Memory of the tree over a window."""

    peak_pss_mb: float  # max over the samples that read memory of the tree's summed PSS
    memory_metric: str  # "pss" or "uss": what the *_pss_* figures hold
    # Growth leaves file-backed pages out where the kernel reports them (Pss_File): a shared
    # library's share moves whenever any other process maps or unmaps it, by tens of MB for
    # torch, while copy-on-read and leaks grow anonymous memory.
    pss_growth_mb: float  # tree PSS at the last sample minus at the first
    worker_pss_mb: float | None  # mean per worker at the last memory sample that has workers
    worker_pss_growth_mb: float | None  # mean per worker, between its first and last memory sample


@dataclass(frozen=True)
class ResourceFigures:
    """Figures of one window: its CPU and memory, reads, and the workers seen."""

    cpu: CpuUse
    memory: MemoryUse
    read_mb: float | None  # read by the tree over the window (see io_metric); None when unavailable
    io_metric: str | None
    threads_per_worker: float | None  # mean num_threads over workers and samples
    workers: int  # distinct worker processes seen (restarted workers count again)
    peak_workers: int  # most workers alive at one sample
    sampler_load: float  # the sampler's CPU seconds per wall second (fraction of one core)

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
        cpu=CpuUse(
            wall_s=wall_s,
            cpu_util=util(main_cpu_s + workers_cpu_s),
            main_cpu_util=util(main_cpu_s),
            workers_cpu_util=util(workers_cpu_s),
            main_cpu_s=main_cpu_s,
            workers_cpu_s=workers_cpu_s,
        ),
        memory=MemoryUse(
            peak_pss_mb=max(tree_pss) / BYTES_PER_MB,
            memory_metric=samples.memory_metric,
            pss_growth_mb=(tree_growing[-1] - tree_growing[0]) / BYTES_PER_MB,
            worker_pss_mb=_mean(workers.last_pss) / BYTES_PER_MB if workers.last_pss else None,
            worker_pss_growth_mb=_mean(workers.growths) / BYTES_PER_MB if workers.growths else None,
        ),
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
