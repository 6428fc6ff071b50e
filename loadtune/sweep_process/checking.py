"""The data check in the sweep process: whether each measured trial delivered the baseline's
samples (datacheck compares them), read from the trials' runs."""

from __future__ import annotations

from typing import Mapping

from loadtune.asked.trials import BASELINE, IDEAL
from loadtune.measure.datacheck import (
    CONTENT,
    LABEL,
    Check,
    Delivery,
    check_all,
    delivery,
    fixes,
    handed,
    sampled,
    streams,
)
from loadtune.present.summary_parts import DataFindings, Flagged
from loadtune.record.findings import ComparedByLabels, Finding, NotChecked, RepeatingSampler
from loadtune.record.measurement import Measurement
from loadtune.sweep_process.trial_run import TrialRun, merged
from loadtune.trial_process.jobs import PreflightInfo


class DataCheck:
    """Compares the indices a map-style dataset's sampler handed out; where there are none (an
    IterableDataset), content keys, or labels where the bytes change per read (preflight's
    stable_bytes). The fixes it names depend on the dataset's kind. It reads the sweep's runs and
    returns each one's check; what the sweep does with them is the sweep's."""

    def __init__(self, info: PreflightInfo, epoch_batches: int | None) -> None:
        self.epoch_batches = epoch_batches
        self.key_kind = LABEL if info.stable_bytes is False else CONTENT
        self.iterable = info.iterable
        self.by_indices = False  # the last check compared indices
        self.repeating_sampler: Delivery | None = None  # every trial's sampler repeats: the least that repeats
        # What each trial delivered (by its sampler's indices, by its samples' keys), with the
        # repeats it was taken from: taken again only when it has more.
        self._delivered: dict[str, tuple[int, Delivery | None, Delivery | None]] = {}

    def deliveries(self, run: TrialRun) -> tuple[Delivery | None, Delivery | None]:
        """What a trial delivered by its sampler's indices and by its samples' keys (None where
        it has none of the kind)."""
        known = self._delivered.get(run.trial.name)
        if known is None or known[0] != run.repeats:
            measurement = merged(run.measurements)
            known = (run.repeats, handed(sampled(measurement)),
                     delivery(streams(measurement), self.key_kind, self._cut(measurement)))
            self._delivered[run.trial.name] = known
        return known[1], known[2]

    def _cut(self, measurement: Measurement) -> int | None:
        """The length epochs were cut at in the windows (an epoch that long may have been cut
        short): the trial's own, where it says so, else measure.epoch_batches."""
        window, whole = measurement.epochs.window_epoch_batches, measurement.epochs.dataset_batches
        if window is None:
            return self.epoch_batches
        return window if whole is None or window < whole else None

    def check(self, runs: Mapping[str, TrialRun]) -> dict[str, Check]:
        """Each measured trial's data check against the reference (the baseline, unless it repeats
        samples itself), by name: the baseline may be measured after a trial, and every new trial
        can move the reference, so every measured trial is checked again."""
        measured = {name: run for name, run in runs.items()
                    if name != IDEAL and run.live and run.failure is None and run.done}
        found = {name: self.deliveries(run) for name, run in measured.items()}
        # By indices where every trial has them (a map-style dataset whose samplers hand out
        # integers); else every trial by its keys, as indices and keys do not compare.
        self.by_indices = bool(found) and all(indices is not None for indices, _ in found.values())
        pick = 0 if self.by_indices else 1
        deliveries = {name: delivered for name, both in found.items() if (delivered := both[pick]) is not None}
        least = min(deliveries.values(), key=lambda d: d.repeat_rate, default=None)
        self.repeating_sampler = least if self.by_indices and least is not None and least.repeated else None
        checks = check_all(deliveries, BASELINE)
        return {name: checks.get(name, Check(None, reason=self._unchecked_reason())) for name in measured}

    def _unchecked_reason(self) -> str:
        if self.key_kind == LABEL:
            reason = ("the samples' bytes change from one read to the next (random augmentation?) and the batches "
                      "carry no 1-D integer tensor (labels or indices) to compare instead")
        else:
            reason = "the batches hold no tensor with one row per sample to take keys from"
        if self.iterable is False:
            return f"the sampler hands out indices that are not plain integers, and {reason}"
        return reason

    def findings(self, runs: Mapping[str, TrialRun]) -> DataFindings:
        """The trials the data check flagged, with the fixes, and why some were not checked."""
        flagged = tuple(Flagged(name, check.verdict or "", check.reason, fixes(check, self.iterable))
                        for name, run in runs.items()
                        if (check := run.check) is not None and run.flagged and run.failure is None)
        flagged += tuple(Flagged(name, record.measuring.data_check or "", record.reason or "", ())
                         for name, run in runs.items()
                         if run.check is None and run.flagged and (record := run.record) is not None)
        checks = [run.check for run in runs.values() if run.check is not None]
        notes: list[Finding] = []
        unchecked = [c for c in checks if c.verdict is None]
        if unchecked:
            notes.append(NotChecked(len(unchecked), len(checks), unchecked[0].reason))
        if self.key_kind == LABEL and not self.by_indices and len(unchecked) < len(checks):
            notes.append(ComparedByLabels())
        if self.repeating_sampler is not None:
            notes.append(RepeatingSampler(self.repeating_sampler.repeated, self.repeating_sampler.samples))
        return DataFindings(flagged, tuple(notes))

