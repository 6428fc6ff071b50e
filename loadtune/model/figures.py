"""The pipeline's figures each measured trial shows directly (fetch CPU and waiting, hand-over,
step, copy, epoch start-up), combined over the trials; `fit` searches the rest."""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence

import numpy as np

from loadtune.model.evidence import Evidence
from loadtune.model.fitted import FittedFigures, MeasuredCosts, PipelineModel, starting


def _median(values: Iterable[float | None], default: float = 0.0) -> float:
    present = [float(v) for v in values if v is not None and math.isfinite(v)]
    return statistics.median(present) if present else default


def uncontended(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Trials whose loading processes had a core each beside the training thread: their fetch
    wall time is the fetch's own, not time spent queued for a core."""
    calm = [e for e in evidence if e.workers == 0 or e.workers <= max(1, math.floor(e.cores) - 1)]
    return calm or [min(evidence, key=lambda e: e.workers)]


def _first_fetch_ms(fetch_cpu: float, fetch_wait: float, workers: int, cores: float) -> float:
    """The first batch of an epoch, with every worker fetching its first at once on the cores."""
    return fetch_wait + fetch_cpu * max(1.0, workers / cores)


def base_figures(evidence: Sequence[Evidence], dataset_len: int | None) -> PipelineModel:
    """The figures each trial shows directly, combined over the trials (medians: one odd process
    moves none of them); the figures in FITTED_GRIDS are left neutral for `fit` to search."""
    fetch_cpu, fetch_wait = _fetch_figures(evidence)
    handover = _handover_figure(evidence)
    threads = _step_threads(evidence, handover)
    step = _step_figure(evidence, threads)
    step_cpu = min(max(step_cpu_figure(evidence, threads, handover) or 0.0, 0.0), step)
    pinned = [e.h2d_ms for e in evidence if e.settings["pin_memory"]]
    plain = [e.h2d_ms for e in evidence if not e.settings["pin_memory"]]
    h2d = _median(plain, _median(pinned))
    h2d_pinned = _median(pinned, h2d)
    start0, start_per, resume = _start_figures(evidence, fetch_cpu, fetch_wait)
    alone = [e.loading.fetch_ms / e.batch_size for e in evidence if e.loading.fetch_ms is not None and e.workers == 0]
    costs = MeasuredCosts(
        fetch_cpu_ms_per_sample=fetch_cpu, fetch_wait_ms_per_sample=fetch_wait,
        main_fetch_ms_per_sample=_median(alone) if alone else None, handover_ms_per_sample=handover,
        step_ms_per_sample=step, step_cpu_ms_per_sample=step_cpu, h2d_ms=h2d, h2d_pinned_ms=h2d_pinned,
        worker_start_ms=start0, worker_start_per_worker_ms=start_per, persistent_resume_ms=resume)
    return PipelineModel(costs, FittedFigures(), cores=evidence[0].cores, dataset_len=dataset_len,
                         ranks=evidence[0].ranks, trials=len(evidence), step_threads=threads)


def step_cpu_figure(evidence: Sequence[Evidence], threads: int, handover_ms_per_sample: float) -> float | None:
    """The step's CPU on each of its `threads` threads, ms per sample (None where no trial shows
    it). A step on several threads spins while crowded (its CPU grows with its wall time), so that
    is read where nothing crowds it (quiet_steps)."""
    shown = evidence if threads == 1 else quiet_steps(evidence)
    cpu = [c / (e.batch_size * threads) for e in shown if (c := step_cpu_ms(e, handover_ms_per_sample)) is not None]
    return statistics.median(cpu) if cpu else None


def quiet_steps(evidence: Sequence[Evidence]) -> list[Evidence]:
    """The trials whose step had the cores to itself: without workers (else those with the fewest)."""
    fewest = min(e.workers for e in evidence)
    return [e for e in evidence if e.workers == fewest]


def _step_threads(evidence: Sequence[Evidence], handover_ms_per_sample: float) -> int:
    """Threads the step's CPU runs on at once: its CPU over its wall time where nothing crowds
    it (the trials without workers; with workers, a step's threads wait for the cores and its
    CPU over its wall time falls), rounded, between 1 and the cores. A step on a busy machine
    reads fewer: its threads then wait for the cores there too. One thread where the trials with
    workers show the step as mostly not CPU work: without workers the training process's CPU
    beyond its fetch's own thread was then the fetch's (torch ops on several threads). Where
    every trial set the training process's threads (main_threads) alike, those."""
    cores = max(1, math.floor(min(e.cores for e in evidence)))
    set_to = {e.settings.get("main_threads") for e in evidence}
    if len(set_to) == 1 and (threads := next(iter(set_to))) is not None:
        return int(min(max(int(threads), 1), cores))

    def ratios(with_workers: bool) -> list[float]:
        return [cpu / e.step_ms for e in evidence if bool(e.workers) == with_workers and e.step_ms
                and e.step_ms > 0 and (cpu := step_cpu_ms(e, handover_ms_per_sample)) is not None]

    alone, beside = ratios(False), ratios(True)
    if not alone or (beside and statistics.median(beside) < 0.5):
        return 1
    return int(min(max(round(statistics.median(alone)), 1), cores))


def _step_figure(evidence: Sequence[Evidence], threads: int = 1) -> float:
    """The step's wall time per sample, uncontended. On ranks a step as timed holds its collective
    and the wait for the slowest rank's batch (the simulation adds that wait): the trial that
    waited least shows the step and its collective alone, where the workers had every rank's
    batch ready (one rank: the median of the uncontended trials; for a step on several threads,
    those without workers: any worker beside it crowds its threads)."""
    timed = [e for e in evidence if e.step_ms is not None] or list(evidence)
    if timed[0].ranks > 1:
        ready = [e for e in timed if e.workers] or timed
        return min((e.step_ms / e.batch_size for e in ready if e.step_ms is not None), default=0.0)
    calm = quiet_steps(timed) if threads > 1 else uncontended(timed)
    return _median((e.step_ms / e.batch_size for e in calm if e.step_ms is not None), 0.0)


def _fetch_figures(evidence: Sequence[Evidence]) -> tuple[float, float]:
    """A fetch's CPU and its waiting, in ms per sample: the workers' fetches where there are any
    (the training process may fetch differently: its torch ops use several threads; a worker's
    use one), its waiting from the uncontended trials; without a timed fetch, the loop's own
    wait without workers is the fetch."""
    timed = [e for e in evidence if e.loading.fetch_ms is not None]
    with_fetch = [e for e in timed if e.workers] or timed
    calm = uncontended(with_fetch) if with_fetch else []
    fetch_cpu = _median(e.loading.fetch_ms * (e.loading.fetch_cpu_share or 0.0) / e.batch_size
                        for e in with_fetch if e.loading.fetch_ms is not None)
    fetch_wait = _median(e.loading.fetch_ms * (1 - (e.loading.fetch_cpu_share or 0.0)) / e.batch_size
                         for e in calm if e.loading.fetch_ms is not None)
    if not with_fetch:
        fetch_wait = _median((e.period_ms * e.wait_ratio / e.batch_size for e in evidence
                              if e.workers == 0 and e.wait_ratio is not None), 0.0)
    return fetch_cpu, fetch_wait


def _handover_figure(evidence: Sequence[Evidence]) -> float:
    """The training thread's CPU per sample to receive a batch from a worker. Without persistent
    workers its CPU in next() also holds each epoch's worker start-up: the persistent trials
    show the hand-over alone, else the lowest."""
    handovers = [(e.loading.handover_ms / e.batch_size, bool(e.settings["persistent_workers"])) for e in evidence
                 if e.workers > 0 and e.loading.handover_ms is not None]
    kept = [ms for ms, persistent in handovers if persistent]
    return _median(kept) if kept else min((ms for ms, _ in handovers), default=0.0)


def _start_figures(evidence: Sequence[Evidence], fetch_cpu: float, fetch_wait: float) -> tuple[float, float, float]:
    """An epoch's start without persistent workers (fixed part, and per worker started in
    turn: see starting), and with them (the resume), in ms: each epoch's wait for its first
    batch less that batch's own fetch."""
    starts = [(e, e.loading.epoch_start_ms) for e in evidence if e.workers > 0 and e.loading.epoch_start_ms is not None]

    def start_up(e: Evidence, waited_ms: float) -> float:
        first = _first_fetch_ms(fetch_cpu * e.batch_size, fetch_wait * e.batch_size, e.workers, e.cores)
        return waited_ms - first

    start0, start_per = _line([(starting(e.workers, e.cores), start_up(e, ms)) for e, ms in starts
                               if not e.settings["persistent_workers"]])
    resume = max(0.0, _median((start_up(e, ms) for e, ms in starts if e.settings["persistent_workers"]), 0.0))
    return start0, start_per, resume


def step_cpu_ms(e: Evidence, handover_ms_per_sample: float) -> float | None:
    """The step's host CPU per batch: the training process's CPU per batch less what it spent
    receiving batches (with workers) or fetching them (without)."""
    if e.main_cpu_util is None:
        return None
    main_ms = e.main_cpu_util * e.cores * e.period_ms
    loading = e.loading
    if e.workers == 0:
        if loading.fetch_ms is None or loading.fetch_cpu_share is None:
            return None
        return main_ms - loading.fetch_ms * loading.fetch_cpu_share
    return main_ms - (loading.handover_ms if loading.handover_ms is not None else handover_ms_per_sample * e.batch_size)


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares intercept and slope (both kept at 0 or above); one x: its median, slope 0."""
    if not points:
        return 0.0, 0.0
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    if len(set(xs.tolist())) < 2:
        return max(0.0, float(np.median(ys))), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    slope = max(0.0, float(slope))
    if intercept < 0:
        intercept = 0.0
        slope = max(0.0, float(np.sum(xs * ys) / np.sum(xs * xs)))
    return float(intercept), slope

