"""Figures of a trial, derived from its raw per-batch samples with numpy.

The figures are the training run's (loadtune.record.run_epochs: epoch starts weighed by the run's
epoch length, not the windows'). Their intervals hold two levels of noise (docs/methodology.md,
"Intervals"): a window's batches vary around its process's own figure, and whole processes vary
around the config's. A trial's own batches show only the first; the second is pooled over the
sweep's trials measured in several processes (ProcessNoise).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from loadtune.record.interval import NOISY_RELATIVE_SPREAD, Interval
from loadtune.record.measurement import Measurement, Window
from loadtune.record.run_epochs import RunEpochs, combine, early_means, run_epochs, run_figures, split

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BLOCK_BATCHES = 5
SEED = 0
# What a rerun measures carries its own noise besides this run's: the interval a rerun's estimate
# lands in is this much wider than the config's own (two independent estimates' difference).
RERUN_WIDTH = math.sqrt(2)
# Draws of a log figure beyond this many e-folds say nothing more (and would overflow exp).
MAX_LOG_DRAW = 20.0


def seed_of(name: str) -> int:
    """Each trial's bootstrap draws its own resamples (the same each time for the same trial):
    two trials' draws must be independent for the ratio of their draws to mean anything."""
    return zlib.crc32(name.encode())


@dataclass(frozen=True)
class BatchTimes:
    """Per-batch figures of a trial's counted batches."""

    wait_ms: float
    wait_p95_ms: float
    h2d_ms: float
    step_ms: float
    first_batch_s: float
    epoch_start_ms: float
    copy_gb_per_s: float | None = None  # bytes per batch / device-timed copy, where timed


@dataclass(frozen=True)
class Draws:
    """Draws of the config's own figures (both levels of noise, not a rerun's), for comparing
    trials (see decide): independent between trials."""

    throughput: np.ndarray | None = None
    wait_ratio: np.ndarray | None = None


@dataclass(frozen=True)
class TrialStats:
    wait_ratio: Interval  # the run's wait ratio, with the interval a rerun's estimate lands in
    throughput: Interval  # the run's samples/s, likewise
    times: BatchTimes
    repeats: int
    batches: int
    ranks: int = 1
    wait_ratio_max_rank: float | None = None  # the slowest-fed rank's wait ratio (ranks > 1)
    window_throughput: float | None = None  # samples/s over the counted batches, as the windows cut epochs
    run_epoch_batches: float | None = None  # the run's epoch the figures weigh starts by (None: none weighed)
    draws: Draws = field(default=Draws(), compare=False, repr=False)

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


@dataclass(frozen=True)
class ProcessNoise:
    """How much repeats of the same trial differ from process to process, pooled over the
    trials of a sweep with at least two: the standard deviation of a repeat's log throughput
    (about its relative spread) and of its wait ratio, and the degrees of freedom behind them."""

    throughput_log_sd: float
    wait_ratio_sd: float
    dof: int


# What the spread between processes is before a sweep shows it: a prior worth PRIOR_DOF degrees of
# freedom, which the sweep's own repeats outweigh as they come. Processes on the machines measured
# here differ by 2-16% (benchmarks/repeatability.py): 5% is their middle. A few repeats that happen
# to agree (two processes within 0.5%) do not make a sweep sure of a spread it has barely seen.
PRIOR = ProcessNoise(throughput_log_sd=0.05, wait_ratio_sd=0.02, dof=4)
# A machine's speed drifts over minutes as a whole (its neighbours, its memory bandwidth): a sweep
# rerun minutes later reads every config a few percent higher or lower together. No single sweep
# can see it. On the development machine, the level shift between reruns of the same sweep (the
# median over configs of each run's log throughput less the configs' means) had a standard
# deviation of 1-10% over 10 sets of 5 reruns (benchmarks/repeatability.py): 4.5% is their root
# mean square (the wait ratio's: 0.4-5 points, 2.5 their root mean square). A trial's interval
# (where a rerun lands) holds it; comparisons inside one sweep do not need it.
MACHINE_DRIFT = ProcessNoise(throughput_log_sd=0.045, wait_ratio_sd=0.025, dof=0)


def window_figures(measurement: Measurement, run_epoch_batches: int | None = None) -> list[tuple[float, float]]:
    """Each window's (repeat's) wait ratio and throughput, as the run would see them."""
    return [(f.wait_ratio, f.throughput) for f in run_figures(measurement, run_epoch_batches)]


def pooled_noise(measurements: Iterable[Measurement], run_epoch_batches: int | None = None) -> ProcessNoise | None:
    """The spread between repeats (processes) of each trial, pooled over the trials that have
    at least two (a one-way random-effects analysis: each trial's own mean taken out), with the
    PRIOR's degrees of freedom beside theirs: what a trial's own batches cannot show. None when
    no trial has two."""
    log_ss = wait_ss = 0.0
    dof = 0
    for measurement in measurements:
        figures = [(w, t) for w, t in window_figures(measurement, run_epoch_batches) if t > 0 and math.isfinite(t)]
        if len(figures) < 2:
            continue
        logs = np.log([t for _, t in figures])
        waits = np.array([w for w, _ in figures])
        log_ss += float(((logs - logs.mean()) ** 2).sum())
        wait_ss += float(((waits - waits.mean()) ** 2).sum())
        dof += len(figures) - 1
    if dof == 0:
        return None
    prior = PRIOR.dof
    return ProcessNoise(math.sqrt((log_ss + prior * PRIOR.throughput_log_sd ** 2) / (dof + prior)),
                        math.sqrt((wait_ss + prior * PRIOR.wait_ratio_sd ** 2) / (dof + prior)), dof + prior)


def _within(windows: tuple[Window, ...], epochs: RunEpochs, rng: np.random.Generator) -> np.ndarray | None:
    """Bootstrap draws (resamples, 3) of the trial's mean run parts per batch over its windows,
    from its own batches alone: each window's steady batches resampled in blocks of
    BLOCK_BATCHES consecutive ones (a DataLoader's queue correlates neighbours), its early places
    kept (how many starts a window holds is fixed by the settings, not chance). None when no
    window has two blocks to resample."""
    fill = early_means(windows, epochs)
    total = np.zeros((BOOTSTRAP_RESAMPLES, 3))
    varied = False
    for window in windows:
        found = split(window, epochs, fill)
        rows = found.steady
        blocks = [rows[i:i + BLOCK_BATCHES] for i in range(0, len(rows), BLOCK_BATCHES)]
        if len(blocks) >= 2:
            sums = np.array([b.sum(axis=0) for b in blocks])
            counts = np.array([len(b) for b in blocks], dtype=float)
            picks = rng.integers(0, len(blocks), size=(BOOTSTRAP_RESAMPLES, len(blocks)))
            steady = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)[:, None]
            varied = True
        else:
            steady = np.broadcast_to(rows.mean(axis=0), (BOOTSTRAP_RESAMPLES, 3))
        total += combine(found.early, steady, epochs)
    return total / len(windows) if varied else None


def _figures(parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wait ratio and throughput of per-batch parts (..., 3)."""
    period = np.where(parts[..., 0] > 0, parts[..., 0], np.nan)
    return np.clip(parts[..., 1] / period, 0.0, 1.0), parts[..., 2] / period


def _log_sd(draws: np.ndarray) -> float:
    finite = draws[np.isfinite(draws) & (draws > 0)]
    return float(np.log(finite).std()) if finite.size > 1 else 0.0


def _sd(draws: np.ndarray) -> float:
    finite = draws[np.isfinite(draws)]
    return float(finite.std()) if finite.size > 1 else 0.0


def _t(dof: int, rng: np.random.Generator) -> np.ndarray:
    """Draws of Student's t with `dof` degrees of freedom: a spread estimated from `dof` degrees
    is itself uncertain, so an interval from two or three repeats is as wide as it should be."""
    return rng.standard_t(dof, size=BOOTSTRAP_RESAMPLES)


def rerun_interval(mean: float, draws: np.ndarray | None, log: bool = True, drift_sd: float = 0.0) -> Interval:
    """The 95% interval a rerun's estimate lands in: the draws of the config's own figure, their
    spread about `mean` widened by RERUN_WIDTH (the rerun's noise is as large as this run's), on
    the log scale for throughputs and ratios, as they are for a wait ratio (a share of time: its
    interval stays in [0, 1]); with `drift_sd`, the machine's drift between the two sweeps (each
    sweep's level off by that much) added to each side in quadrature."""
    if draws is None:
        return Interval(mean, mean, mean)
    finite = draws[np.isfinite(draws) & ((draws > 0) if log else True)]
    if finite.size == 0 or not math.isfinite(mean) or (log and mean <= 0):
        return Interval(mean, mean, mean)
    tail = (1 - CONFIDENCE) / 2 * 100
    deviations = np.log(finite / mean) if log else finite - mean
    low, high = RERUN_WIDTH * np.percentile(deviations, [tail, 100 - tail])
    drift = RERUN_WIDTH * drift_sd * _Z95
    low, high = -math.hypot(min(low, 0.0), drift), math.hypot(max(high, 0.0), drift)
    lo, hi = (mean * math.exp(low), mean * math.exp(high)) if log else \
        (max(mean + low, min(mean, 0.0)), min(mean + high, max(mean, 1.0)))
    return Interval(mean, float(min(lo, mean)), float(max(hi, mean)))


_Z95 = 1.959964  # the normal's two-sided 95% point


def summarize(measurement: Measurement, seed: int = SEED, noise: ProcessNoise | None = None,
              run_epoch_batches: int | None = None, drift: ProcessNoise | None = MACHINE_DRIFT,
              batch_floor: bool = True) -> TrialStats:
    """The run's wait ratio and throughput (means over the windows) with their intervals, and
    per-batch figures.

    Each figure's draws hold both levels of noise: its standard error is the spread between
    processes (`noise`, pooled over the sweep; else over this trial's own windows when it has
    two or more) over the square root of the windows, with Student's t tails for the degrees of
    freedom that spread was pooled from, and never less than what the trial's own batches show
    (a block bootstrap; without `batch_floor`, a run of many windows, each a minute of a training
    run, leaves that floor out: their spread holds the batches' noise, and the bootstrap over
    hundreds of thousands of batches would take a second). Without either level known (one
    window, no pooled spread), the draws are the batches' bootstrap alone. The intervals are
    where a rerun's estimate lands (rerun_interval), the machine's `drift` between sweeps held;
    the draws are what decisions compare.
    """
    windows = measurement.windows
    epochs = run_epochs(measurement, run_epoch_batches)
    per_window = window_figures(measurement, run_epoch_batches)
    wait_ratio = float(np.mean([r for r, _ in per_window]))
    throughput = float(np.mean([t for _, t in per_window]))
    rng = np.random.default_rng(seed)
    own = _within(windows, epochs, rng) if batch_floor or len(windows) < 2 else None
    noise = noise if noise is not None else pooled_noise([measurement], run_epoch_batches)
    # The machine's drift between sweeps, where the spread between processes is known (before,
    # the intervals say only how well each process was measured).
    drift = drift if drift is not None and noise is not None else ProcessNoise(0.0, 0.0, 0)
    draws = _draws(own, noise, len(windows), wait_ratio, throughput, rng)
    return TrialStats(
        wait_ratio=rerun_interval(wait_ratio, draws.wait_ratio, log=False, drift_sd=drift.wait_ratio_sd),
        throughput=rerun_interval(throughput, draws.throughput, drift_sd=drift.throughput_log_sd),
        times=_batch_times(measurement),
        repeats=len(windows),
        batches=len(windows[0]) if windows else 0,
        ranks=max(1, len(measurement.ranks)),
        wait_ratio_max_rank=max(_wait_ratio(r, run_epoch_batches) for r in measurement.ranks)
        if measurement.ranks else None,
        window_throughput=float(np.mean([_ratios(*_arrays(w))[1] for w in windows])),
        run_epoch_batches=epochs.batches if epochs.early and math.isfinite(epochs.batches) else None,
        draws=draws,
    )


def _draws(own: np.ndarray | None, noise: ProcessNoise | None, repeats: int, wait_ratio: float,
           throughput: float, rng: np.random.Generator) -> Draws:
    """The figures' draws: the batches' bootstrap (`own`), widened to the spread between
    processes (`noise`) over the square root of the `repeats`, with Student's t tails."""
    tp_draws: np.ndarray | None = None
    wr_draws: np.ndarray | None = None
    if own is not None:
        wr_draws, tp_draws = _figures(own)
    if noise is not None:
        root = math.sqrt(repeats)
        log_se = max(noise.throughput_log_sd / root, _log_sd(tp_draws) if tp_draws is not None else 0.0)
        wr_se = max(noise.wait_ratio_sd / root, _sd(wr_draws) if wr_draws is not None else 0.0)
        tp_draws = throughput * np.exp(np.clip(log_se * _t(noise.dof, rng), -MAX_LOG_DRAW, MAX_LOG_DRAW))
        wr_draws = np.clip(wait_ratio + wr_se * _t(noise.dof, rng), 0.0, 1.0)
    return Draws(throughput=tp_draws, wait_ratio=wr_draws)


def _batch_times(measurement: Measurement) -> BatchTimes:
    """The per-batch figures of a measurement's counted batches."""
    windows = measurement.windows
    wait = np.concatenate([a[0] for a in map(_arrays, windows)])
    h2d = np.concatenate([a[1] for a in map(_arrays, windows)])
    step = np.concatenate([a[2] for a in map(_arrays, windows)])
    starts = np.concatenate([np.asarray(w.epoch_start, dtype=bool) for w in windows])
    epoch_start_ms = float(wait[starts].mean() * 1e3) if starts.any() else math.nan
    copies = [c for w in windows for c in w.copy_s]
    copy_s = float(np.mean(copies)) if copies and len(copies) == len(wait) else 0.0
    copy_gb_per_s = measurement.batch_bytes / copy_s / 1e9 if copy_s > 0 and measurement.batch_bytes else None
    return BatchTimes(
        wait_ms=float(wait.mean() * 1e3),
        wait_p95_ms=float(np.percentile(wait, 95) * 1e3),
        h2d_ms=float(h2d.mean() * 1e3),
        step_ms=float(step.mean() * 1e3),
        first_batch_s=measurement.start.first_batch_s,
        epoch_start_ms=epoch_start_ms,
        copy_gb_per_s=copy_gb_per_s,
    )


def _wait_ratio(measurement: Measurement, run_epoch_batches: int | None) -> float:
    """Mean over the windows of one rank's wait ratio, as the run would see it."""
    return float(np.mean([wait for wait, _ in window_figures(measurement, run_epoch_batches)]))
