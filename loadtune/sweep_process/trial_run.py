"""Everything the sweep holds about one trial while it is measured (TrialRun), and its repeats
merged into one Measurement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from loadtune.measurement import Measurement
from loadtune.results.model import Prediction
from loadtune.results.record import DATA_FLAGGED, RankRecord, Record
from loadtune.results.samples import TrialSamples
from loadtune.sweep_process.datacheck import Check, Delivery
from loadtune.sweep_process.decide import Scored
from loadtune.sweep_process.launch import Outcome
from loadtune.trials import Trial


def merged(measurements: Sequence[Measurement]) -> Measurement:
    """One trial's repeats, each from a process (or set of ranks) of its own, as one Measurement."""
    n = len(measurements)
    return Measurement(
        first_batch_s=sum(m.first_batch_s for m in measurements) / n,
        windows=tuple(w for m in measurements for w in m.windows),
        pinned=measurements[0].pinned,
        batch_bytes=measurements[0].batch_bytes,
        resources=tuple(r for m in measurements for r in m.resources),
        warmup_s=sum(m.warmup_s for m in measurements) / n,
        warmup_batches=max(m.warmup_batches for m in measurements),
        setup_s=sum(m.setup_s for m in measurements) / n,
        ranks=tuple(merged(per_rank) for per_rank in zip(*(m.ranks for m in measurements))),
        sampled=tuple(epoch for m in measurements for epoch in m.sampled),
        dataset_batches=measurements[0].dataset_batches,
        window_epoch_batches=measurements[0].window_epoch_batches,
        restarts_workers=measurements[0].restarts_workers,
    )


@dataclass
class TrialRun:
    """Everything the sweep holds about one trial: what was asked, each repeat's measurement
    and wall time, how it ended, and its record once finished."""

    trial: Trial
    round: int
    measurements: list[Measurement] = field(default_factory=list)
    walls_s: list[float] = field(default_factory=list)
    failure: Outcome | None = None  # the run that failed or timed out; no more repeats then
    record: Record | None = None
    score: Scored | None = None
    resumed: bool = False  # kept from the file by --resume without its raw samples: figures as recorded
    # Restored by --resume with its raw samples, until the strategy asks for it again (its trial
    # then known in full): left out of the model, the data check, the noise and racing till then.
    pending: bool = False
    measured_at: str | None = None  # when it was first measured, when that was in an earlier sweep
    stopped_early: bool = False  # racing stopped it: clearly behind the leader
    disturbed: int = 0  # repeats measured again because other processes used the cores
    rank_records: list[RankRecord] = field(default_factory=list)  # with ranks: each rank's own figures
    check: Check | None = None  # its data check (datacheck), once there was something to compare
    # (repeats, delivery by its sampler's indices, by its samples' keys) they were taken from
    delivered: tuple[int, Delivery | None, Delivery | None] | None = None
    predicted: Prediction | None = None  # what the pipeline model predicted before it ran

    @property
    def flagged(self) -> bool:
        """It delivered other samples than the baseline: kept out of racing, ranking and the pick."""
        if self.check is not None:
            return self.check.verdict in DATA_FLAGGED
        return self.resumed and self.record is not None and self.record.data_flagged

    @property
    def live(self) -> bool:
        """Its raw samples are at hand and its trial known in full (not kept as recorded, nor pending)."""
        return not self.resumed and not self.pending

    @property
    def repeats(self) -> int:
        return len(self.measurements)

    @property
    def mean_wall_s(self) -> float:
        return sum(self.walls_s) / len(self.walls_s) if self.walls_s else 0.0



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
    return TrialSamples(run.trial.name, run.round, tuple(run.measurements), tuple(run.walls_s), run.disturbed,
                        (str(failure.status), failure.reason, failure.wall_s) if failure is not None else None,
                        (predicted.throughput, predicted.wait_ratio) if predicted is not None else None,
                        run.stopped_early)


def placeholder(name: str, record: Record | None) -> Trial:
    """A trial kept from an earlier run, as far as its row tells it, until the strategy asks for
    it again (its settings are then known in full)."""
    return Trial(name, (record.changed or "") if record else "", record.value if record else None, ())


def restored(samples: TrialSamples, record: Record | None) -> TrialRun:
    """A run kept with its raw samples (pending until the strategy asks for its trial again)."""
    predicted = None
    if samples.predicted is not None:  # only its figures are kept: what the CSV's predicted columns show
        predicted = Prediction(samples.predicted[0], samples.predicted[1], period_ms=0.0, cpu_bound=False)
    return TrialRun(placeholder(samples.trial, record), samples.round, list(samples.measurements),
                    list(samples.walls_s), record=record, stopped_early=samples.stopped_early,
                    disturbed=samples.disturbed, predicted=predicted, pending=True,
                    measured_at=record.started_at if record else None)
