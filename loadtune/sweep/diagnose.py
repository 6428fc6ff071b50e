"""Why a trial waits: its resource figures (averaged over its repeats) and a verdict with advice."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from loadtune.measurement import Measurement
from loadtune.sweep.resources import ResourceFigures, shm_need_mb, summarize_resources
from loadtune.sweep.stats import TrialStats
from loadtune.sweep.verdict import (
    Evidence,
    epoch_starts_per_batch,
    epoch_wait_share,
    oversubscription_warning,
    verdict,
)

COLUMNS = ("cpu_util", "main_cpu_util", "workers_cpu_util", "peak_pss_mb", "worker_pss_mb", "pss_growth_mb",
           "read_mb", "threads_per_worker", "shm_need_mb", "memory_metric", "verdict", "advice")


@dataclass(frozen=True)
class Diagnosis:
    columns: dict[str, Any]
    warnings: tuple[str, ...] = ()


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
    With ranks, each runs its own workers: the figures are of all of them together."""
    figures = resource_figures(measurement, usable_cores)
    per_rank = kwargs.get("num_workers", 0)
    workers = per_rank * ranks
    prefetch = kwargs.get("prefetch_factor")
    need_mb = shm_need_mb(measurement.batch_bytes, workers, prefetch) if measurement.batch_bytes else None
    columns: dict[str, Any] = {c: None for c in COLUMNS}
    columns["shm_need_mb"] = need_mb
    if not figures:
        return Diagnosis(columns)
    cpu_util = statistics.fmean(f.cpu_util for f in figures)
    threads = _mean([f.threads_per_worker for f in figures])
    main_util = statistics.fmean(f.main_cpu_util for f in figures)
    workers_util = statistics.fmean(f.workers_cpu_util for f in figures)
    # Share of one core each loading process used: the workers' mean, or the main process.
    loader_busy = workers_util * usable_cores / workers if workers else main_util * usable_cores / ranks
    columns.update(
        cpu_util=cpu_util,
        main_cpu_util=main_util,
        workers_cpu_util=workers_util,
        peak_pss_mb=_max([f.peak_pss_mb for f in figures]),
        worker_pss_mb=_mean([f.worker_pss_mb for f in figures]),
        pss_growth_mb=_mean([f.pss_growth_mb for f in figures]),
        read_mb=_mean([f.read_mb for f in figures]),
        threads_per_worker=threads,
        memory_metric=figures[0].memory_metric,
    )
    evidence = Evidence(
        # With ranks, the most starved rank sets the pace of all (each step ends together).
        wait_ratio=stats.wait_ratio_max_rank if stats.wait_ratio_max_rank is not None else stats.wait_ratio.mean,
        cpu_util=cpu_util,
        usable_cores=usable_cores,
        num_workers=per_rank,
        wait_ms=stats.wait_ms,
        epoch_start_ms=stats.epoch_start_ms,
        epoch_wait_share=epoch_wait_share(stats.wait_ms, stats.epoch_start_ms, epoch_starts_per_batch(measurement)),
        worker_pss_growth_mb=_mean([f.worker_pss_growth_mb for f in figures]),
        pss_growth_mb=_mean([f.pss_growth_mb for f in figures]),
        threads_per_worker=threads,
        persistent_workers=kwargs.get("persistent_workers"),
        inflight_mb_per_worker=(need_mb / workers) if need_mb and workers else 0.0,
        loader_busy=loader_busy,
        ranks=ranks,
    )
    columns["verdict"], columns["advice"] = verdict(evidence)
    warning = oversubscription_warning(workers, threads, usable_cores)
    return Diagnosis(columns, (f"{name}: {warning}",) if warning else ())
