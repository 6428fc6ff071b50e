"""Why a trial waits: its resource figures (averaged over its repeats) and a verdict with advice."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from loadtune.decide.stats import TrialStats
from loadtune.measure.cpu import cpu_outside_share
from loadtune.measure.resource_figures import ResourceFigures, summarize_resources
from loadtune.measure.resources import shm_need_mb
from loadtune.measure.verdict import (
    Evidence,
    InsideTrial,
    MemoryGrowth,
    Settings,
    Waits,
    epoch_starts_per_batch,
    epoch_wait_share,
    oversubscription_warning,
    suggestions,
    verdict,
)
from loadtune.record.findings import ThreadsOversubscribed
from loadtune.record.measurement import Measurement

COLUMNS = ("cpu_util", "main_cpu_util", "workers_cpu_util", "peak_pss_mb", "worker_pss_mb", "pss_growth_mb",
           "read_mb", "threads_per_worker", "shm_need_mb", "memory_metric", "verdict", "advice",
           "fetch_ms", "fetch_cpu_share", "worker_idle_share", "handover_ms", "outside_cpu")


@dataclass(frozen=True)
class WindowEvidence:
    """What the counted windows show of a trial from inside it, over their repeats: the tree's
    CPU and the machine's, each loading process's fetches, and the training thread's CPU while
    it waited. Utilisations are shares of the usable cores."""

    cpu_util: float | None  # the tree's CPU / wall / usable cores
    main_cpu_util: float | None
    workers_cpu_util: float | None
    machine_busy: float | None  # every process on the machine, as the kernel counts it
    outside_cpu: float | None  # the machine's busy share less the tree's: other processes (largest window)
    fetch_ms: float | None  # wall time per batch fetched, in the loading processes
    fetch_cpu_share: float | None  # CPU / wall inside those fetches, 0-1
    worker_idle_share: float | None  # share of a window each worker spent not fetching (mean over workers)
    handover_ms: float | None  # training-thread CPU per batch inside next(), with workers: receiving a batch


def outside_share(measurement: Measurement, usable_cores: float) -> float | None:
    """The largest share of the usable cores that processes outside the trial used in a window."""
    shares = [share for w in measurement.windows if w.cpu is not None
              and (share := cpu_outside_share(w.cpu, usable_cores)) is not None]
    return max(shares) if shares else None


def machine_busy_now(watch_s: float, usable_cores: float) -> float | None:
    """Share of the usable cores busy over the next `watch_s` seconds (the kernel's count, this
    process included: it only sleeps meanwhile)."""
    import time

    from loadtune.measure.cpu import machine_busy

    t0, (start, _) = time.perf_counter(), machine_busy()
    time.sleep(watch_s)
    t1, (end, _) = time.perf_counter(), machine_busy()
    if start is None or end is None:
        return None
    return max(0.0, end - start) / (t1 - t0) / usable_cores


def window_evidence(measurement: Measurement, usable_cores: float, workers: int) -> WindowEvidence:
    """The in-trial figures of a measurement's windows (None where a window did not read them)."""
    cpus = [w.cpu for w in measurement.windows if w.cpu is not None and w.cpu.wall_s > 0]
    wall = sum(c.wall_s for c in cpus)
    main = sum(c.main_cpu_s for c in cpus)
    work = sum(c.workers_cpu_s for c in cpus)
    busy = [(c.machine_busy_s, c.wall_s * c.machine_cpus) for c in cpus
            if c.machine_busy_s is not None and c.machine_cpus]
    machine = sum(b for b, _ in busy) / sum(capacity for _, capacity in busy) if busy else None
    uses = [u for w in measurement.windows for u in w.loaders]
    fetched = sum(u.batches for u in uses)
    fetch_wall = sum(u.fetch_wall_s for u in uses)
    idle = [max(0.0, 1 - u.fetch_wall_s / w.cpu.wall_s) for w in measurement.windows if w.cpu is not None
            for u in w.loaders if u.worker >= 0]
    wait_cpu = [c for w in measurement.windows for c in w.wait_cpu_s]
    return WindowEvidence(
        cpu_util=(main + work) / wall / usable_cores if wall else None,
        main_cpu_util=main / wall / usable_cores if wall else None,
        workers_cpu_util=work / wall / usable_cores if wall else None,
        machine_busy=machine,
        outside_cpu=outside_share(measurement, usable_cores),
        fetch_ms=fetch_wall / fetched * 1e3 if fetched else None,
        fetch_cpu_share=min(1.0, sum(u.fetch_cpu_s for u in uses) / fetch_wall) if fetch_wall > 0 else None,
        worker_idle_share=statistics.fmean(idle) if idle and workers else None,
        handover_ms=statistics.fmean(wait_cpu) * 1e3 if wait_cpu and workers else None,
    )


@dataclass(frozen=True)
class Diagnosis:
    columns: dict[str, Any]
    warnings: tuple[ThreadsOversubscribed, ...] = ()
    suggestions: tuple[tuple[tuple[str, Any], ...], ...] = ()  # settings the advice names (verdict.suggestions)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _max(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def resource_figures(measurement: Measurement, usable_cores: float) -> list[ResourceFigures]:
    """One set of figures per repeat that sampled its process tree (two samples at least)."""
    return [summarize_resources(s, usable_cores) for s in measurement.resources if len(s.samples) >= 2]


def diagnose(name: str, kwargs: dict[str, Any], measurement: Measurement, stats: TrialStats,
             usable_cores: float, ranks: int = 1) -> Diagnosis:
    """Resource columns, the verdict and its advice, and warnings for one trial that ran.
    With ranks, each runs its own workers: the figures are of all of them together. CPU comes
    from inside the trial, at the edges of each counted window; memory, threads and reads from
    the sweep's sampler of the trial's tree."""
    workers = kwargs.get("num_workers", 0) * ranks
    need_mb = shm_need_mb(measurement.batch_bytes, workers, kwargs.get("prefetch_factor")) \
        if measurement.batch_bytes else None
    trial = _Trial(kwargs, measurement, stats, usable_cores, ranks, resource_figures(measurement, usable_cores),
                   window_evidence(measurement, usable_cores, workers), need_mb)
    inside, figures = trial.inside, trial.figures
    columns: dict[str, Any] = {c: None for c in COLUMNS}
    columns.update(shm_need_mb=need_mb, fetch_ms=inside.fetch_ms, fetch_cpu_share=inside.fetch_cpu_share,
                   worker_idle_share=inside.worker_idle_share, handover_ms=inside.handover_ms,
                   outside_cpu=inside.outside_cpu)
    if inside.cpu_util is None and not figures:
        return Diagnosis(columns)
    use = _Use.of(inside, figures)
    columns.update(
        cpu_util=use.cpu_util,
        main_cpu_util=use.main_cpu_util,
        workers_cpu_util=use.workers_cpu_util,
        peak_pss_mb=_max([f.memory.peak_pss_mb for f in figures]),
        worker_pss_mb=_mean([f.memory.worker_pss_mb for f in figures]),
        pss_growth_mb=_mean([f.memory.pss_growth_mb for f in figures]),
        read_mb=_mean([f.read_mb for f in figures]),
        threads_per_worker=use.threads_per_worker,
        memory_metric=figures[0].memory.memory_metric if figures else None,
    )
    evidence = trial.evidence(use)
    columns["verdict"], columns["advice"] = verdict(evidence)
    warning = oversubscription_warning(workers, use.threads_per_worker, usable_cores, name)
    suggested = tuple(tuple(sorted(change.items())) for change in suggestions(evidence))
    return Diagnosis(columns, (warning,) if warning else (), suggested)


@dataclass(frozen=True)
class _Use:
    """What a trial's tree used: CPU as shares of the usable cores (from inside its windows,
    else the sampler's mean over its repeats) and threads per worker."""

    cpu_util: float
    main_cpu_util: float
    workers_cpu_util: float
    threads_per_worker: float | None

    @classmethod
    def of(cls, inside: WindowEvidence, figures: Sequence[ResourceFigures]) -> _Use:
        return cls(
            inside.cpu_util if inside.cpu_util is not None else statistics.fmean(f.cpu.cpu_util for f in figures),
            inside.main_cpu_util if inside.main_cpu_util is not None else
            statistics.fmean(f.cpu.main_cpu_util for f in figures),
            inside.workers_cpu_util if inside.workers_cpu_util is not None else
            statistics.fmean(f.cpu.workers_cpu_util for f in figures),
            _mean([f.threads_per_worker for f in figures]))


@dataclass(frozen=True)
class _Trial:
    """One trial being diagnosed: its settings and figures, from inside it and from the sampler."""

    kwargs: dict[str, Any]
    measurement: Measurement
    stats: TrialStats
    usable_cores: float
    ranks: int
    figures: list[ResourceFigures]  # one per repeat the sampler read
    inside: WindowEvidence
    need_mb: float | None  # shared memory the batches in flight need

    def evidence(self, use: _Use) -> Evidence:
        """What the verdict is drawn from."""
        stats, inside, figures = self.stats, self.inside, self.figures
        per_rank = self.kwargs.get("num_workers", 0)
        workers = per_rank * self.ranks
        # Share of one core each loading process used: the workers' mean, or the main process.
        loader_busy = use.workers_cpu_util * self.usable_cores / workers if workers else \
            use.main_cpu_util * self.usable_cores / self.ranks
        return Evidence(
            # With ranks, the most starved rank sets the pace of all (each step ends together).
            wait_ratio=stats.wait_ratio_max_rank if stats.wait_ratio_max_rank is not None else stats.wait_ratio.mean,
            cpu_util=use.cpu_util,
            usable_cores=self.usable_cores,
            num_workers=per_rank,
            waits=Waits(wait_ms=stats.times.wait_ms, epoch_start_ms=stats.times.epoch_start_ms,
                        epoch_wait_share=epoch_wait_share(stats.times.wait_ms, stats.times.epoch_start_ms,
                                                          epoch_starts_per_batch(self.measurement))),
            memory=MemoryGrowth(
                worker_pss_growth_mb=_mean([f.memory.worker_pss_growth_mb for f in figures]),
                pss_growth_mb=_mean([f.memory.pss_growth_mb for f in figures]),
                inflight_mb_per_worker=(self.need_mb / workers) if self.need_mb and workers else 0.0,
            ),
            threads_per_worker=use.threads_per_worker,
            loader_busy=loader_busy,
            ranks=self.ranks,
            inside=InsideTrial(
                machine_busy=inside.machine_busy,
                outside_cpu=inside.outside_cpu,
                fetch_cpu_share=inside.fetch_cpu_share,
                worker_idle_share=inside.worker_idle_share,
                handover_share=min(1.0, inside.handover_ms / stats.times.wait_ms) if inside.handover_ms is not None
                and stats.times.wait_ms > 0 else None,
            ),
            settings=Settings(persistent_workers=self.kwargs.get("persistent_workers"),
                              prefetch_factor=self.kwargs.get("prefetch_factor"),
                              in_order=self.kwargs.get("in_order", True)),
        )
