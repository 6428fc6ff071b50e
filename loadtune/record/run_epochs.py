"""What the training run sees of a trial: each counted window's batches turned into the figures of
the run's own epochs (docs/methodology.md, "Ranked for the run").

A window may cut epochs short to see their starts (measure.epoch_batches), so it weighs each
start by one over its cut length, or see none in an epoch longer than itself; the training run
weighs each by one over its real epoch length. So each batch is placed in its epoch: the first
`early` places after a start (the start and the workers' first batches after it) are taken one
by one, the rest are the steady state, and the run's epoch of E batches is the early places as
measured plus E - early steady batches. A window that holds whole epochs of the run's length
gives exactly its own figures. Numpy only: the sweep and the offline readers use it alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from loadtune.record.measurement import Measurement, Window

# (period, wait, samples) of one batch: its wall time, the part of it waiting for data (the
# wait and the copy to the device), and its samples.
Parts = tuple[float, ...]


@dataclass(frozen=True)
class RunEpochs:
    """How a trial's windows map onto the training run's epochs."""

    batches: float  # batches per epoch in the run (inf: no epoch start is weighed in)
    early: int  # places after an epoch start taken one by one (0: no start was seen)
    # Where no window saw a start: what one costs beyond a steady batch, in seconds (the trial's
    # first batch, for workers started again every epoch; nothing otherwise).
    unseen_start_s: float = 0.0


# `stated` for windows that are the run itself (a watched training run, loadtune.training_process):
# each batch counts as it came, every epoch start in its place; nothing is weighed again.
AS_MEASURED = -1


def run_epochs(measurement: Measurement, stated: int | None = None) -> RunEpochs:
    """The run's epoch: `stated` (measure.run_epoch_batches) or the DataLoader's own length as the
    trial built it (per rank, at the sweep's scale); unknown (an IterableDataset without a
    length): no epoch start is weighed in. The early places: half the windows' epoch where it is
    known, else the start batch alone. Where no window saw a start (epochs longer than a window),
    an epoch's start costs what the trial's first batch waited beyond a steady batch's wait, for
    workers started again every epoch (the first batch started them); persistent workers'
    resume, and a loop without workers, add nothing measurable then. AS_MEASURED: the windows'
    own batches, as they came."""
    if stated == AS_MEASURED:
        return RunEpochs(math.inf, 0)
    batches = float(stated or measurement.epochs.dataset_batches or math.inf)
    if not any(any(w.epoch_start) for w in measurement.windows):
        if not measurement.epochs.restarts_workers or not measurement.windows:
            return RunEpochs(batches, 0)
        waits = np.concatenate([_parts(w)[:, 1] for w in measurement.windows])
        return RunEpochs(batches, 0, max(0.0, measurement.start.first_batch_s - float(waits.mean())))
    seen = measurement.epochs.window_epoch_batches
    return RunEpochs(batches, max(1, seen // 2) if seen else 1)


@dataclass(frozen=True)
class RunFigures:
    """One window as the run would see it, per batch: the epochs' starts spread over them."""

    period_s: float
    wait_s: float
    samples: float

    @property
    def throughput(self) -> float:
        return self.samples / self.period_s if self.period_s > 0 else math.inf

    @property
    def wait_ratio(self) -> float:
        return min(1.0, self.wait_s / self.period_s) if self.period_s > 0 else 0.0


def _parts(window: Window) -> np.ndarray:
    """(batches, 3): each batch's period, wait and samples."""
    wait = np.asarray(window.wait_s, dtype=float) + np.asarray(window.h2d_s, dtype=float)
    period = wait + np.asarray(window.step_s, dtype=float)
    return np.column_stack([period, wait, np.asarray(window.samples, dtype=float)])


def _places(window: Window) -> np.ndarray:
    """Each batch's place in its epoch, -1 where unknown."""
    return np.array([-1 if p is None else p for p in window.positions()], dtype=int)


def early_means(windows: Sequence[Window], epochs: RunEpochs) -> dict[int, Parts]:
    """Each early place's mean parts over the windows that hold it: what a window that misses a
    place is filled with."""
    found: dict[int, list[np.ndarray]] = {}
    for window in windows:
        parts, places = _parts(window), _places(window)
        for place in range(epochs.early):
            at = places == place
            if at.any():
                found.setdefault(place, []).append(parts[at].mean(axis=0))
    return {place: tuple(float(x) for x in np.mean(rows, axis=0)) for place, rows in found.items()}


def combine(early: Mapping[int, Sequence[float]], steady: np.ndarray, epochs: RunEpochs) -> np.ndarray:
    """The run's per-batch parts (period, wait, samples) from the early places' parts and the
    steady state's mean parts; `steady` may hold many (..., 3), as a bootstrap draws them."""
    if not math.isfinite(epochs.batches):
        return steady
    if not epochs.early:
        start = np.array([epochs.unseen_start_s, epochs.unseen_start_s, 0.0])
        return steady + start / epochs.batches
    places = min(epochs.early, int(math.ceil(epochs.batches)))
    total = np.zeros_like(steady)
    for place in range(places):
        total = total + (np.asarray(early[place], dtype=float) if place in early else steady)
    total = total + max(0.0, epochs.batches - places) * steady
    return total / max(epochs.batches, places)


def figures_of(parts: np.ndarray) -> RunFigures:
    return RunFigures(float(parts[0]), float(parts[1]), float(parts[2]))


@dataclass(frozen=True)
class Split:
    """One window's batches split for the run: the early places' mean parts, and the steady
    batches' parts, one row each."""

    early: Mapping[int, Sequence[float]]
    steady: np.ndarray  # (batches, 3)


def split(window: Window, epochs: RunEpochs, fill: Mapping[int, Parts] | None = None) -> Split:
    """A place after a start that the window does not hold is taken from `fill` (the trial's
    other windows), else from the steady state; a window all of early places is its own steady
    state."""
    parts, places = _parts(window), _places(window)
    is_early = (places >= 0) & (places < epochs.early)
    early: dict[int, Sequence[float]] = {}
    for place in range(epochs.early):
        at = places == place
        if at.any():
            early[place] = tuple(parts[at].mean(axis=0))
        elif fill is not None and place in fill:
            early[place] = fill[place]
    return Split(early, parts[~is_early] if (~is_early).any() else parts)


def window_run(window: Window, epochs: RunEpochs, fill: Mapping[int, Parts] | None = None) -> RunFigures:
    """One window's figures for the run's epochs."""
    found = split(window, epochs, fill)
    return figures_of(combine(found.early, found.steady.mean(axis=0), epochs))


def run_figures(measurement: Measurement, stated: int | None = None) -> list[RunFigures]:
    """Each window's figures for the run's epochs."""
    epochs = run_epochs(measurement, stated)
    fill = early_means(measurement.windows, epochs)
    return [window_run(w, epochs, fill) for w in measurement.windows]
