"""Everything the sweep holds about one trial while it is measured (TrialRun: its repeats as
measured, and what was derived from them), its repeats merged into one Measurement, and its
figures derived from them: pure functions of what was measured (its repeats, its data check, the
model's prediction) and the sweep's pooled noise between processes, to its score (what racing and
ranking see), its record and, with ranks, each rank's record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from loadtune.asked.config import Config
from loadtune.asked.plan import grid_plan, ideal_trial, ofat_plan, trial_for
from loadtune.asked.trials import COMBINED, FEED_MEMORY, Trial, cost_of
from loadtune.core.kinds import Status
from loadtune.decide.selection import Scored
from loadtune.decide.stats import ProcessNoise, TrialStats, seed_of, summarize
from loadtune.measure.datacheck import Check
from loadtune.measure.diagnose import diagnose
from loadtune.measure.records import rank_records, stats_columns, trial_record
from loadtune.model.fitted import Prediction
from loadtune.record.findings import Finding
from loadtune.record.measurement import Measurement, TrialStart
from loadtune.record.record import DATA_FLAGGED, RankRecord, Record
from loadtune.record.samples import TrialSamples
from loadtune.record.settings import recorded_settings
from loadtune.sweep_process.launch import Outcome


@dataclass(frozen=True)
class Deriving:
    """What deriving a trial's figures needs of the sweep besides its repeats: the machine and
    run columns of every record, the cores the resource samples cover and the ranks whose process
    trees they hold, the training run's epoch (None: each trial's DataLoader's length), and
    whether each rank's own figures are written."""

    context: Mapping[str, Any]
    cores: float
    sampled_ranks: int
    run_epoch: int | None
    per_rank: bool


@dataclass(frozen=True)
class Derived:
    """A trial's figures as derived now: its score, record, per-rank records, and what
    diagnosing it warns of (threads oversubscribed)."""

    score: Scored | None
    record: Record
    rank_records: tuple[RankRecord, ...] = ()
    warnings: tuple[Finding, ...] = ()


def derive(run: TrialRun, noise: ProcessNoise | None, how: Deriving) -> Derived:
    """The run's figures from its repeats: as recorded for a trial kept from the file (only what
    racing says of it now); `skipped` for a trial refused before it ran; failed when a repeat
    failed (its other repeats do not make it sound) or none finished; else its stats with the
    pooled `noise`, its diagnosis, and with ranks each rank's figures."""
    trial = run.trial
    keep = tuple(run.rank_records)
    if run.resumed and run.record is not None:
        stopped = run.stopped_early or run.record.measuring.stopped_early
        return Derived(run.score, run.record.with_columns(stopped_early=stopped), keep)
    if trial.skipped:
        return Derived(run.score, trial_record(trial, how.context, round_no=run.round, status=Status.SKIPPED), keep)
    if run.failure is not None or not run.done:
        failure = run.failure or Outcome(Status.FAILED, "no repeat finished")
        return Derived(None, trial_record(trial, how.context, round_no=run.round, status=failure.status,
                                          reason=failure.reason, wall_s=failure.wall_s), keep)
    measurement = merged(run.measurements)
    stats = summarize(measurement, seed=seed_of(trial.name), noise=noise, run_epoch_batches=how.run_epoch)
    score = Scored(trial.name, stats.throughput, stats.wait_ratio, stats.draws.throughput, stats.draws.wait_ratio,
                   run.repeats, cost_of(trial.loader_kwargs))
    diagnosis: Mapping[str, Any] | None = None
    warnings: tuple[Finding, ...] = ()
    if trial.feed != FEED_MEMORY:
        found = diagnose(trial.name, trial.loader_kwargs, measurement, stats, how.cores, how.sampled_ranks)
        diagnosis, warnings = found.columns, tuple(found.warnings)
        score = dataclasses.replace(score, suggests=found.suggestions)
    started = run.record.run.started_at if run.record is not None else None
    record = trial_record(trial, how.context, round_no=run.round, wall_s=run.mean_wall_s, stats=stats,
                          measurement=measurement, diagnosis=diagnosis, stopped_early=run.stopped_early,
                          disturbed_repeats=run.disturbed, **check_columns(run.check),
                          **predicted_columns(run.predicted), **({"started_at": started} if started else {}))
    if how.per_rank and measurement.ranks:
        keep = tuple(rank_records(trial, [(summarize(m, run_epoch_batches=how.run_epoch), m)
                                          for m in measurement.ranks], how.context))
    return Derived(score, record, keep, warnings)


def renoised(score: Scored, record: Record | None, stats: TrialStats) -> tuple[Scored, Record | None]:
    """A measured trial's score and record with its intervals derived again with another pooled
    noise (`stats`: its repeats summarized with it): only the figures the noise moves change."""
    score = dataclasses.replace(score, throughput=stats.throughput, wait_ratio=stats.wait_ratio,
                                throughput_draws=stats.draws.throughput, wait_ratio_draws=stats.draws.wait_ratio)
    if record is not None:
        record = Record.rounded(**{**record.to_dict(), **stats_columns(stats)})
    return score, record


def noised_stats(measurement: Measurement, name: str, noise: ProcessNoise | None,
                 run_epoch: int | None) -> TrialStats:
    """A trial's stats with the pooled noise (its own bootstrap seed)."""
    return summarize(measurement, seed=seed_of(name), noise=noise, run_epoch_batches=run_epoch)


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
    def whole(self) -> list[Repeat]:
        """Its repeats whose windows racing did not end early."""
        return [r for r in self.done if not r.measurement.behind]

    @property
    def next_repeat(self) -> int:
        """The repeat a new process of it makes: a revived trial's whole window (Racer._revive)
        takes the place of its cut one, not a repeat of its own."""
        return len(self.whole) + 1

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
