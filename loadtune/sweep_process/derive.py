"""A trial's figures derived from its repeats: pure functions of what was measured (TrialRun's
repeats, its data check, the model's prediction) and the sweep's pooled noise between processes,
to its score (what racing and ranking see), its record and, with ranks, each rank's record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from loadtune.kinds import Status
from loadtune.measurement import Measurement
from loadtune.results.findings import Finding
from loadtune.results.record import RankRecord, Record
from loadtune.sweep_process.decide import Scored
from loadtune.sweep_process.diagnose import diagnose
from loadtune.sweep_process.launch import Outcome
from loadtune.sweep_process.records import rank_records, stats_columns, trial_record
from loadtune.sweep_process.stats import ProcessNoise, TrialStats, seed_of, summarize
from loadtune.sweep_process.trial_run import TrialRun, check_columns, merged, predicted_columns
from loadtune.trials import FEED_MEMORY, cost_of


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
