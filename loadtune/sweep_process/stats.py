"""Figures of a trial, derived from its raw per-batch samples with numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from loadtune.measurement import Measurement, Window
from loadtune.results.interval import NOISY_RELATIVE_SPREAD, Interval

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
# With fewer repeats than this, the interval is bootstrapped over blocks of batches instead.
MIN_REPEATS_FOR_REPEAT_BOOTSTRAP = 5
BLOCK_BATCHES = 5
SEED = 0


@dataclass(frozen=True)
class TrialStats:
    wait_ratio: Interval
    throughput: Interval
    wait_ms: float
    wait_p95_ms: float
    h2d_ms: float
    step_ms: float
    first_batch_s: float
    epoch_start_ms: float
    repeats: int
    batches: int
    ranks: int = 1
    wait_ratio_max_rank: float | None = None  # the slowest-fed rank's wait ratio (ranks > 1)
    copy_gb_per_s: float | None = None  # bytes per batch / device-timed copy, where timed
    # The bootstrap draws behind the intervals, for comparing trials (see decide).
    throughput_draws: np.ndarray | None = field(default=None, compare=False, repr=False)
    wait_ratio_draws: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def noisy(self) -> bool:
        return self.throughput.relative_spread > NOISY_RELATIVE_SPREAD


def _ratios(wait: np.ndarray, h2d: np.ndarray, step: np.ndarray, samples: np.ndarray) -> tuple[float, float]:
    fed = wait.sum() + h2d.sum()
    total = fed + step.sum()
    if total <= 0:
        return 0.0, math.inf
    return float(fed / total), float(samples.sum() / total)


Group = tuple[np.ndarray, ...]  # wait, h2d, step, samples of some consecutive batches


def _arrays(window: Window) -> Group:
    return tuple(np.asarray(a, dtype=float) for a in (window.wait_s, window.h2d_s, window.step_s, window.samples))


def _bootstrap(strata: list[list[Group]], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample the groups of each stratum with replacement, as many as it has; the wait ratio
    and throughput of each resample."""
    totals = np.zeros((BOOTSTRAP_RESAMPLES, 4))
    for groups in strata:
        sums = np.array([[g.sum() for g in group] for group in groups])  # (groups, 4)
        picks = rng.integers(0, len(groups), size=(BOOTSTRAP_RESAMPLES, len(groups)))
        totals += sums[picks].sum(axis=1)  # (resamples, 4): wait, h2d, step, samples
    fed = totals[:, 0] + totals[:, 1]
    whole = fed + totals[:, 2]
    whole = np.where(whole > 0, whole, np.nan)
    return fed / whole, totals[:, 3] / whole


def _strata(arrays: list[Group], starts: list[np.ndarray]) -> list[list[Group]]:
    """Epoch-start batches and steady-state blocks of BLOCK_BATCHES, resampled apart: how many
    epoch starts a window holds is fixed by the settings, not chance, and must stay so."""
    first, steady = [], []
    for arr, start in zip(arrays, starts):
        first.extend(tuple(a[i:i + 1] for a in arr) for i in np.flatnonzero(start))
        rest = tuple(a[~start] for a in arr)
        steady.extend(tuple(a[i:i + BLOCK_BATCHES] for a in rest) for i in range(0, len(rest[0]), BLOCK_BATCHES))
    return [s for s in (first, steady) if s]


@dataclass(frozen=True)
class ProcessNoise:
    """How much repeats of the same trial differ from process to process, pooled over the
    trials of a sweep with at least two: the standard deviation of a repeat's log throughput
    (about its relative spread) and of its wait ratio, and the degrees of freedom behind them."""

    throughput_log_sd: float
    wait_ratio_sd: float
    dof: int


def window_figures(measurement: Measurement) -> list[tuple[float, float]]:
    """Each window's (repeat's) wait ratio and throughput."""
    return [_ratios(*_arrays(w)) for w in measurement.windows]


def pooled_noise(measurements: Iterable[Measurement]) -> ProcessNoise | None:
    """The spread between repeats (processes) of each trial, pooled over the trials that have
    at least two: what a trial's own batches cannot show. None when no trial has two."""
    log_ss = wait_ss = 0.0
    dof = 0
    for measurement in measurements:
        figures = [(w, t) for w, t in window_figures(measurement) if t > 0 and math.isfinite(t)]
        if len(figures) < 2:
            continue
        logs = np.log([t for _, t in figures])
        waits = np.array([w for w, _ in figures])
        log_ss += float(((logs - logs.mean()) ** 2).sum())
        wait_ss += float(((waits - waits.mean()) ** 2).sum())
        dof += len(figures) - 1
    if dof == 0:
        return None
    return ProcessNoise(math.sqrt(log_ss / dof), math.sqrt(wait_ss / dof), dof)


def _widen(mean: float, draws: np.ndarray, sd: float, dof: int, rng: np.random.Generator) -> np.ndarray:
    """Draws spread at least `sd` about the mean: the bootstrap's own spread, or the pooled one
    between processes where that is larger (their shape kept, scaled). That pooled spread is
    itself an estimate from `dof` degrees of freedom: each widened draw is scaled again by
    sqrt(dof / chi-square(dof)), which turns a normal spread into Student's t with `dof`
    degrees, so that an interval from two or three repeats is as wide as it should be."""
    finite = draws[np.isfinite(draws)]
    have = float(finite.std()) if finite.size else 0.0
    if sd <= have:
        return draws
    if have > sd * 1e-3:
        spread = (draws - mean) * (sd / have)
    else:  # the draws barely differ (rounding apart): no shape to keep, a normal spread instead
        spread = rng.normal(0.0, sd, size=draws.shape)
    return mean + spread * np.sqrt(dof / rng.chisquare(dof, size=draws.shape))


def _interval(mean: float, draws: np.ndarray) -> Interval:
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return Interval(mean, mean, mean)
    tail = (1 - CONFIDENCE) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return Interval(mean, float(min(lo, mean)), float(max(hi, mean)))


def summarize(measurement: Measurement, seed: int = SEED, noise: ProcessNoise | None = None) -> TrialStats:
    """Means over repeats and 95% intervals for wait ratio and throughput, plus per-batch figures.

    With at least MIN_REPEATS_FOR_REPEAT_BOOTSTRAP repeats the interval resamples whole
    repeats; with fewer it resamples blocks of BLOCK_BATCHES consecutive batches, which keeps
    the short-range correlation of a DataLoader's queue inside each block, with the epoch-start
    batches resampled apart from the rest (a stratified bootstrap). Blocks cannot show how much
    whole processes differ: with `noise` (the sweep's pooled spread between repeats), the draws
    are widened to at least that spread over the square root of the repeats, with Student's t
    tails for the degrees of freedom the spread was pooled from.
    """
    windows = measurement.windows
    arrays = [_arrays(w) for w in windows]
    per_window = [_ratios(*a) for a in arrays]
    wait_ratio = float(np.mean([r for r, _ in per_window]))
    throughput = float(np.mean([t for _, t in per_window]))
    rng = np.random.default_rng(seed)
    starts_by_window = [np.asarray(w.epoch_start, dtype=bool) for w in windows]
    if len(windows) >= MIN_REPEATS_FOR_REPEAT_BOOTSTRAP:
        strata = [list(arrays)]
    else:
        strata = _strata(arrays, starts_by_window)
    if sum(len(s) for s in strata) >= 2:
        wr_draws, tp_draws = _bootstrap(strata, rng)
        if noise is not None and len(windows) < MIN_REPEATS_FOR_REPEAT_BOOTSTRAP:
            root = math.sqrt(len(windows))
            tp_draws = _widen(throughput, tp_draws, throughput * noise.throughput_log_sd / root, noise.dof, rng)
            wr_draws = np.clip(_widen(wait_ratio, wr_draws, noise.wait_ratio_sd / root, noise.dof, rng), 0.0, 1.0)
        wr, tp = _interval(wait_ratio, wr_draws), _interval(throughput, tp_draws)
    else:
        wr_draws = tp_draws = None
        wr, tp = Interval(wait_ratio, wait_ratio, wait_ratio), Interval(throughput, throughput, throughput)
    wait = np.concatenate([a[0] for a in arrays])
    h2d = np.concatenate([a[1] for a in arrays])
    step = np.concatenate([a[2] for a in arrays])
    starts = np.concatenate(starts_by_window)
    epoch_start_ms = float(wait[starts].mean() * 1e3) if starts.any() else math.nan
    copies = [c for w in windows for c in w.copy_s]
    copy_s = float(np.mean(copies)) if copies and len(copies) == len(wait) else 0.0
    copy_gb_per_s = measurement.batch_bytes / copy_s / 1e9 if copy_s > 0 and measurement.batch_bytes else None
    return TrialStats(
        wait_ratio=wr,
        throughput=tp,
        wait_ms=float(wait.mean() * 1e3),
        wait_p95_ms=float(np.percentile(wait, 95) * 1e3),
        h2d_ms=float(h2d.mean() * 1e3),
        step_ms=float(step.mean() * 1e3),
        first_batch_s=measurement.first_batch_s,
        epoch_start_ms=epoch_start_ms,
        repeats=len(windows),
        batches=len(windows[0]) if windows else 0,
        ranks=max(1, len(measurement.ranks)),
        wait_ratio_max_rank=max(_wait_ratio(r) for r in measurement.ranks) if measurement.ranks else None,
        copy_gb_per_s=copy_gb_per_s,
        throughput_draws=tp_draws,
        wait_ratio_draws=wr_draws,
    )


def _wait_ratio(measurement: Measurement) -> float:
    """Mean over the windows of one rank's wait ratio."""
    return float(np.mean([wait for wait, _ in window_figures(measurement)]))
