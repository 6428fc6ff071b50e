"""Everything the sweep holds about one trial while it is measured (TrialRun: its repeats as
measured, and what was derived from them), and its repeats merged into one Measurement."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

from loadtune.config import Config
from loadtune.measurement import Measurement, TrialStart
from loadtune.results.choice import recorded_settings
from loadtune.results.pipeline import Prediction
from loadtune.results.record import DATA_FLAGGED, RankRecord, Record
from loadtune.results.samples import TrialSamples
from loadtune.sweep_process.datacheck import Check
from loadtune.sweep_process.decide import Scored
from loadtune.sweep_process.launch import Outcome
from loadtune.sweep_process.plan import grid_plan, ideal_trial, ofat_plan, trial_for
from loadtune.trials import COMBINED, Trial


def merged(measurements: Sequence[Measurement]) -> Measurement:
    """One trial's repeats, each from a process (or set of ranks) of its own, as one Measurement."""
    n = len(measurements)
    return Measurement(
        start=TrialStart(
            first_batch_s=sum(m.start.first_batch_s for m in measurements) / n,
            warmup_s=sum(m.start.warmup_s for m in measurements) / n,
            warmup_batches=max(m.start.warmup_batches for m in measurements),
            setup_s=sum(m.start.setup_s for m in measurements) / n,
        ),
        windows=tuple(w for m in measurements for w in m.windows),
        pinned=measurements[0].pinned,
        batch_bytes=measurements[0].batch_bytes,
        resources=tuple(r for m in measurements for r in m.resources),
        ranks=tuple(merged(per_rank) for per_rank in zip(*(m.ranks for m in measurements))),
        epochs=dataclasses.replace(measurements[0].epochs,
                                   sampled=tuple(epoch for m in measurements for epoch in m.epochs.sampled)),
        behind=any(m.behind for m in measurements),
    )


class Origin(Enum):
    """Where a run's figures come from: measured in this sweep (LIVE); kept from the file by
    --resume without its raw samples, figures as recorded (KEPT); or restored by --resume with its
    raw samples, until the strategy asks for it again, its trial then known in full (PENDING):
    left out of the model, the data check, the noise and racing till then."""

    LIVE = "live"
    KEPT = "kept"
    PENDING = "pending"


@dataclass(frozen=True)
class Repeat:
    """One repeat of a trial, a process (or set of ranks) of its own: its raw measurement and
    its wall time."""

    measurement: Measurement
    wall_s: float


@dataclass
class TrialRun:
    """Everything the sweep holds about one trial: what was asked, each repeat, how it ended, what
    the data check and the model said of it, and its score and record as last derived (derive)."""

    trial: Trial
    round: int
    done: list[Repeat] = field(default_factory=list)  # the repeats measured, in order
    failure: Outcome | None = None  # the run that failed or timed out; no more repeats then
    record: Record | None = None
    score: Scored | None = None
    origin: Origin = Origin.LIVE
    stopped_early: bool = False  # racing stopped it: clearly behind the leader
    disturbed: int = 0  # repeats measured again because other processes used the cores
    rank_records: list[RankRecord] = field(default_factory=list)  # with ranks: each rank's own figures
    check: Check | None = None  # its data check (datacheck), once there was something to compare
    predicted: Prediction | None = None  # what the pipeline model predicted before it ran

    @property
    def resumed(self) -> bool:
        """Kept from the file by --resume without its raw samples: figures as recorded."""
        return self.origin == Origin.KEPT

    @property
    def pending(self) -> bool:
        """Restored with its raw samples, until the strategy asks for it again."""
        return self.origin == Origin.PENDING

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(r.measurement for r in self.done)

    @property
    def cut_short(self) -> bool:
        """Racing ended one of its windows early, clearly behind the leader (measurement.Behind):
        its figures hold only the batches before, and rank after every trial measured in full."""
        return any(r.measurement.behind for r in self.done)

    @property
    def walls_s(self) -> tuple[float, ...]:
        return tuple(r.wall_s for r in self.done)

    @property
    def flagged(self) -> bool:
        """It delivered other samples than the baseline: kept out of racing, ranking and the pick."""
        if self.check is not None:
            return self.check.verdict in DATA_FLAGGED
        return self.resumed and self.record is not None and self.record.data_flagged

    @property
    def contending(self) -> Scored:
        """Its score as racing, ranking and the strategies see it: flagged by the data check, or
        not scored, it is as a trial that did not run."""
        if self.score is None or self.flagged:
            return Scored(self.trial.name, None, None)
        return self.score

    @property
    def live(self) -> bool:
        """Its raw samples are at hand and its trial known in full (not kept as recorded, nor pending)."""
        return self.origin == Origin.LIVE

    @property
    def repeats(self) -> int:
        return len(self.done)

    @property
    def mean_wall_s(self) -> float:
        return sum(r.wall_s for r in self.done) / len(self.done) if self.done else 0.0


def predicted_columns(predicted: Prediction | None) -> dict[str, Any]:
    """What the model predicted for a trial before it ran (nothing when there was no model yet)."""
    if predicted is None:
        return {}
    return {"predicted_throughput": predicted.throughput, "predicted_wait_ratio": predicted.wait_ratio}


def check_columns(check: Check | None) -> dict[str, Any]:
    """A record's data_check and, when flagged, its reason: what is wrong."""
    if check is None:
        return {}
    flagged = check.verdict in DATA_FLAGGED
    return {"data_check": check.verdict, "reason": f"data_check {check.verdict}: {check.reason}" if flagged else ""}


def samples_of(run: TrialRun) -> TrialSamples:
    """What is kept of a run beside the CSV: its raw samples and how it ended."""
    failure = run.failure
    predicted = run.predicted
    return TrialSamples(run.trial.name, run.round, run.measurements, run.walls_s, run.disturbed,
                        (str(failure.status), failure.reason, failure.wall_s) if failure is not None else None,
                        (predicted.throughput, predicted.wait_ratio) if predicted is not None else None,
                        run.stopped_early)


def placeholder(name: str, record: Record | None) -> Trial:
    """A trial kept from an earlier run, as far as its row tells it, until the strategy asks for
    it again (its settings are then known in full)."""
    return Trial(name, (record.settings.changed or "") if record else "", record.settings.value if record else None, ())


def restored(samples: TrialSamples, record: Record | None) -> TrialRun:
    """A run kept with its raw samples (pending until the strategy asks for its trial again)."""
    predicted = None
    if samples.predicted is not None:  # only its figures are kept: what the CSV's predicted columns show
        predicted = Prediction(samples.predicted[0], samples.predicted[1], period_ms=0.0, cpu_bound=False)
    done = [Repeat(m, wall_s) for m, wall_s in zip(samples.measurements, samples.walls_s)]
    return TrialRun(placeholder(samples.trial, record), samples.round, done, record=record, origin=Origin.PENDING,
                    stopped_early=samples.stopped_early, disturbed=samples.disturbed, predicted=predicted)


def known_in_full(config: Config, accelerator: bool, name: str, record: Record | None) -> Trial | None:
    """A kept trial's settings in full again, as the strategies name it: one of the plans' trials
    (each combination of the swept values, each single change, the ideal), else the baseline with
    the settings its row records (a value a verdict advised, or `combined`); None where no trial of
    this config bears its name, or where it would not run here now."""
    planned = {t.name: t for t in (*grid_plan(config, accelerator), *ofat_plan(config, accelerator),
                                   ideal_trial(config))}
    trial = planned.get(name)
    if trial is None and record is not None:
        trial = _from_row(config, accelerator, record)
    if trial is None or trial.name != name or trial.skipped:
        return None
    asked_by = record.assessment.asked_by if record is not None else None
    return dataclasses.replace(trial, asked_by=asked_by) if asked_by else trial


def _from_row(config: Config, accelerator: bool, record: Record) -> Trial:
    """The baseline with the settings the row records (those the loader config holds), named as
    trial_for names it, or `combined` where the row's value names those changes."""
    base = config.loader.model_dump()
    trial = trial_for(config, {k: v for k, v in recorded_settings(record).items() if k in base}, accelerator)
    if record.settings.changed == COMBINED and record.settings.value == trial.name:
        return Trial(COMBINED, COMBINED, trial.name, trial.settings, trial.skip_reason)
    return trial
