"""Records built from what a sweep observed: a trial's settings, figures and diagnosis as one
typed results record, and its placing once the sweep is ranked."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from loadtune.asked.trials import Trial, effective_settings
from loadtune.core.kinds import Status
from loadtune.decide.stats import TrialStats
from loadtune.record.measurement import Measurement
from loadtune.record.record import RankRecord, Record


def stats_columns(stats: TrialStats) -> dict[str, Any]:
    """The columns a trial's stats fill, in the record and in the per-rank file alike."""
    times = stats.times
    return dict(
        wait_ratio=stats.wait_ratio.mean, wait_ratio_lo=stats.wait_ratio.lo, wait_ratio_hi=stats.wait_ratio.hi,
        throughput=stats.throughput.mean, throughput_lo=stats.throughput.lo, throughput_hi=stats.throughput.hi,
        wait_ms=times.wait_ms, wait_p95_ms=times.wait_p95_ms, h2d_ms=times.h2d_ms, step_ms=times.step_ms,
        first_batch_s=times.first_batch_s, epoch_start_ms=times.epoch_start_ms,
        h2d_gb_per_s=times.copy_gb_per_s,
    )


def trial_record(trial: Trial, context: Mapping[str, Any], *, round_no: int | None, status: str = Status.OK,
                 reason: str = "",
                 wall_s: float | None = None, stats: TrialStats | None = None,
                 measurement: Measurement | None = None, diagnosis: Mapping[str, Any] | None = None,
                 **extra: Any) -> Record:
    """The record of one trial: `context` holds the machine and run columns; a trial planned
    but refused before it ran is `skipped` with its reason; `extra` more columns."""
    if status == Status.SKIPPED:
        reason = trial.skip_reason or reason
    values: dict[str, Any] = dict(context)
    values.update(trial=trial.name, changed=trial.changed, value=trial.value_text, status=status, reason=reason,
                  round=round_no, trial_wall_s=wall_s, asked_by=trial.asked_by,
                  **effective_settings(trial.loader_kwargs))
    values.update(diagnosis or {})
    values.update(extra)
    if measurement is not None:
        values["pinned"] = measurement.pinned
    if stats is not None:
        values.update(stats_columns(stats), repeats=stats.repeats, batches=stats.batches, ranks=stats.ranks,
                      wait_ratio_max_rank=stats.wait_ratio_max_rank, window_throughput=stats.window_throughput,
                      run_epoch_batches=round(stats.run_epoch_batches) if stats.run_epoch_batches else None)
    return Record.rounded(**values)


def rank_records(trial: Trial, per_rank: Sequence[tuple[TrialStats, Measurement]],
                 context: Mapping[str, Any]) -> list[RankRecord]:
    """One record per rank of a trial that ran on several: each rank's own figures."""
    shared = {k: context.get(k) for k in ("config_name", "config_sha", "started_at")}
    return [RankRecord.rounded(trial=trial.name, dist_rank=index, pinned=measurement.pinned, **shared,
                               **stats_columns(stats))
            for index, (stats, measurement) in enumerate(per_rank)]
