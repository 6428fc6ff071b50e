"""A watched loader's record, derived as a sweep's trial is: its intervals as the windows of one
Measurement, summarized (decide.stats), diagnosed (measure.diagnose) and made a row
(measure.records.trial_record) with status `watched`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from loadtune.asked.trials import Trial
from loadtune.core.kinds import Status
from loadtune.decide.stats import seed_of, summarize
from loadtune.measure.diagnose import diagnose
from loadtune.measure.machine import cpu_quota, fingerprint, usable_cores
from loadtune.measure.records import trial_record
from loadtune.record.measurement import LoaderEpochs, Measurement, ResourceSamples, TrialStart, Window
from loadtune.record.record import Record
from loadtune.record.run_epochs import AS_MEASURED
from loadtune.record.samples import TrialSamples

STRATEGY = "watch"  # the strategy column of a watched row


@dataclass(frozen=True)
class WarmUpFigures:
    """The uncounted start of a watched loader: its first batch's wait, and the warm-up after it."""

    first_batch_s: float
    warmup_s: float
    warmup_batches: int  # the first batch included


@dataclass(frozen=True)
class LoaderTraits:
    """What holds for every batch and epoch of a watched loader."""

    batch_bytes: int | None  # bytes of tensors in its first batch
    epoch_batches: int | None  # len(loader): the run's epoch, in batches
    restarts_workers: bool
    pinned: bool | None


@dataclass(frozen=True)
class Observed:
    """What one watched loader saw so far: its counted intervals (each a Window with the tree's
    resource samples over it, where taken) and the run's figures around them."""

    name: str
    settings: Mapping[str, Any]  # the loader's plain settings (probe.loader_settings)
    windows: tuple[Window, ...]
    resources: tuple[ResourceSamples, ...]
    warm_up: WarmUpFigures
    traits: LoaderTraits
    watched_s: float
    reason: str = ""  # how the run ended, when not by itself (the script raised)

    def measurement(self) -> Measurement:
        warm_up, traits = self.warm_up, self.traits
        epochs = LoaderEpochs(dataset_batches=traits.epoch_batches, window_epoch_batches=traits.epoch_batches,
                              restarts_workers=traits.restarts_workers)
        return Measurement(TrialStart(warm_up.first_batch_s, warm_up.warmup_s, warm_up.warmup_batches),
                           windows=self.windows, pinned=traits.pinned, batch_bytes=traits.batch_bytes,
                           resources=self.resources, epochs=epochs)

    @property
    def trial(self) -> Trial:
        return Trial(self.name, "", None, tuple(self.settings.items()))


def run_context(script: str | None, device: str, start_method: str | None, ranks: int,
                dataset_len: int | None, started_at: datetime | None = None) -> dict[str, Any]:
    """The machine and run columns of a watched row (the sweep's, from this process: it has torch)."""
    import torch

    from loadtune.measure.machine import gpu_name

    gpu = gpu_name() if torch.cuda.is_available() else ""
    return {
        **fingerprint(torch.__version__, gpu),
        "config_name": os.path.basename(script) if script else None,
        "dataset_len": dataset_len,
        "scale": 1.0,
        "started_at": (started_at or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        "device": device,
        "strategy": STRATEGY,
        **({"start_method": start_method} if start_method else {}),
    }


def usable() -> float:
    """The cores this process may use (affinity and the container's quota)."""
    cores, quota = usable_cores(), cpu_quota()
    return float(min(cores, quota) if quota else cores)


def watched_record(observed: Observed, context: Mapping[str, Any], *, dist_rank: int, ranks: int,
                   trial_name: str | None = None, status: Status = Status.WATCHED) -> Record | None:
    """The row of one watched loader (on one rank), or None before its first counted interval."""
    if not observed.windows:
        return None
    measurement = observed.measurement()
    # The intervals are the run itself: its figures are its counted batches as they came (each epoch
    # start where it was), not a window's weighed for another epoch length, as a sweep's are.
    stats = summarize(measurement, seed=seed_of(observed.name), run_epoch_batches=AS_MEASURED, batch_floor=False)
    trial = observed.trial
    if trial_name is not None:
        trial = dataclasses.replace(trial, name=trial_name)
    found = diagnose(trial.name, dict(observed.settings), measurement, stats, usable())
    record = trial_record(trial, context, round_no=None, status=status, reason=observed.reason,
                          wall_s=observed.watched_s, stats=stats, measurement=measurement,
                          diagnosis=found.columns, dist_rank=dist_rank)
    # A watched row's batches are every counted batch of the run (a sweep's: those of one window).
    return record.with_columns(ranks=ranks, changed="", value=None,
                              batches=sum(len(w) for w in observed.windows),
                              run_epoch_batches=observed.traits.epoch_batches)


def watched_samples(name: str, observed: Observed, kept: dict[int, Measurement] | None = None) -> TrialSamples:
    """What is kept beside the CSV: each interval a measurement of its own (as a sweep's repeats),
    so a file written again compresses only the intervals it has not written yet (`kept`: each
    interval's measurement by its window's id, made once)."""
    whole = observed.measurement()
    parts = []
    kept = {} if kept is None else kept
    for i, window in enumerate(observed.windows):
        part = kept.get(id(window))
        if part is None or part.windows[0] is not window:
            resources = (observed.resources[i],) if i < len(observed.resources) else ()
            part = kept[id(window)] = dataclasses.replace(whole, windows=(window,), resources=resources)
        parts.append(part)
    for stale in set(kept) - {id(w) for w in observed.windows}:
        del kept[stale]
    return TrialSamples(name, 0, tuple(parts), (observed.watched_s,))
