"""A whole sweep, in the sweep process: preflight, a strategy choosing trials, interleaved
repeats each in a trial process of its own, ranking, and the results file."""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing
import os
import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from loadtune.kinds import EndedBy, RankBy, Status
from loadtune.measurement import Measurement
from loadtune.results.advice import Advised
from loadtune.results.findings import Finding
from loadtune.results.model import ModelReport, PipelineModel, Prediction, fit, leave_one_out_error, prediction_error
from loadtune.results.record import DATA_FLAGGED, RankRecord, Record
from loadtune.results.report import DataFindings, Flagged
from loadtune.results.sweep import Decision, ModelTie
from loadtune.sweep_process import events
from loadtune.sweep_process.datacheck import (
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
from loadtune.sweep_process.decide import RaceStep, Scored, Ties, race_step
from loadtune.sweep_process.diagnose import diagnose, outside_share
from loadtune.sweep_process.files import SweepFiles
from loadtune.sweep_process.launch import Outcome, run_in_trial_process
from loadtune.sweep_process.plan import grid_plan, on_top, trial_for
from loadtune.sweep_process.ranking import scored_from_record
from loadtune.sweep_process.records import rank_records, stats_columns, trial_record
from loadtune.sweep_process.setup import Setup
from loadtune.sweep_process.stats import ProcessNoise, pooled_noise, summarize
from loadtune.sweep_process.strategy import config_key
from loadtune.trial_process.device import is_accelerator
from loadtune.trial_process.jobs import TrialJob
from loadtune.trials import BASELINE, FEED_MEMORY, IDEAL, Trial, cost_of

# Runs one trial job with a timeout: launch.run_in_trial_process, or torchrun's Cluster on every rank.
Executor = Callable[[TrialJob, float], Outcome]
# A repeat disturbed by other processes is measured again at most this many times.
MAX_REDONE = 2
# How long the machine is watched before the first trial, to warn when it is busy already.
BUSY_WATCH_S = 0.25
# The first build of a dataset may fill a cache (download, decode, generate): allowed this long
# at least, whatever measure.timeout_s says about a trial.
PREFLIGHT_MIN_TIMEOUT_S = 600.0
# Two trials the model explains as equal are tied when their measured throughputs differ by at
# most this many standard deviations of the spread between processes (about 95%).
TIE_SPREADS = 2.0


def _merge(measurements: Sequence[Measurement]) -> Measurement:
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
        ranks=tuple(_merge(per_rank) for per_rank in zip(*(m.ranks for m in measurements))),
        sampled=tuple(epoch for m in measurements for epoch in m.sampled),
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
    resumed: bool = False
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
    def repeats(self) -> int:
        return len(self.measurements)

    @property
    def mean_wall_s(self) -> float:
        return sum(self.walls_s) / len(self.walls_s) if self.walls_s else 0.0


class Runner:
    """Measures sets of trials with their repeats interleaved: round-robin over the trials in
    a shuffled order, one process per repeat, so slow drift of the machine favours none."""

    def __init__(self, setup: Setup, files: SweepFiles, *, emit: events.OnEvent = events.ignore, seed: int = 0,
                 execute: Executor = run_in_trial_process, scratch: str | None = None,
                 rank_by: RankBy = RankBy.THROUGHPUT, use_model_ties: bool = False) -> None:
        self.setup, self.files, self.emit, self.execute = setup, files, emit, execute
        self.spec, self.device, self.context = setup.spec, setup.device, setup.context
        self.cores = setup.sampled_cores
        # ranks whose process trees the resource samples cover (under torchrun, rank 0's alone)
        self.sampled_ranks = 1 if setup.spec.torchrun else setup.spec.ranks
        self.scratch = scratch  # a folder for the trials' own files, removed after the sweep
        self.rank_by = rank_by
        self.use_model_ties = use_model_ties  # the model strategy: contenders the model and the data tie are not raced
        self.rng = random.Random(seed)
        self.runs: dict[str, TrialRun] = {}
        self.notes: list[Finding] = []  # what diagnosing the trials found (threads oversubscribed)
        self.runs_planned = 0
        self.started = time.monotonic()
        self.last_race: RaceStep | None = None
        self.budget_spent = False
        # How much repeats differ between processes, pooled over the trials with two or more:
        # it widens the intervals of trials with few repeats (stats.summarize).
        self.noise: ProcessNoise | None = None
        # The data check compares the indices a map-style dataset's sampler handed out; where
        # there are none (an IterableDataset), content keys, or labels where the bytes change per
        # read (preflight's stable_bytes). The fixes it names depend on the dataset's kind.
        self.key_kind = LABEL if setup.info.stable_bytes is False else CONTENT
        self.iterable = setup.info.iterable
        self.by_indices = False  # the last check compared indices
        self.repeating_sampler: Delivery | None = None  # every trial's sampler repeats: the least that repeats
        # The pipeline model, fitted to the measured trials (refitted when they change).
        self.dataset_len = setup.info.dataset_len
        self._model: tuple[tuple, PipelineModel | None] | None = None
        self.model_fell_back = False
        self.model_ties: Ties = frozenset()
        self.tie_notes: tuple[ModelTie, ...] = ()

    # --- what is known ---------------------------------------------------------------------

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.runs.values() if r.record is not None]

    @property
    def trials(self) -> dict[str, Trial]:
        return {name: r.trial for name, r in self.runs.items()}

    # --- the pipeline model --------------------------------------------------------------------

    def _modelled(self) -> list[Record]:
        """The records the model is fitted to: trials measured in this sweep that ran (the ideal
        and trials the data check flagged are not the pipeline)."""
        return [run.record for name, run in self.runs.items()
                if run.record is not None and run.record.ran and name != IDEAL and not run.flagged]

    def fit(self) -> PipelineModel | None:
        """The pipeline model fitted to every trial measured so far (None with too few)."""
        records = self._modelled()
        key = tuple((r.trial, r.repeats, r.throughput) for r in records)
        if self._model is None or self._model[0] != key:
            self._model = (key, fit(records, self.dataset_len, self.spec.config.measure.epoch_batches,
                                    self.spec.config.loader.model_dump()))
        return self._model[1]

    def held_out_error(self) -> float | None:
        """Median |predicted / measured - 1| of each measured trial, by the model fitted to the others."""
        return leave_one_out_error(self._modelled(), self.dataset_len, self.spec.config.measure.epoch_batches)

    def fell_back(self, error: float | None) -> None:
        self.model_fell_back = True
        said = f"its median error on the first round's trials, each predicted from the others, is {error:.0%}" \
            if error is not None else "too few trials ran to fit it"
        self.emit(events.Notice(f"the pipeline model does not fit this pipeline ({said}): measuring as ofat does"))

    def model_report(self) -> ModelReport | None:
        model = self.fit()
        if model is None:
            return None
        error, checked = prediction_error(self.records)
        return ModelReport(model, error, checked, self.model_fell_back)

    def _predict_new(self, runs: Sequence[TrialRun]) -> None:
        """Each new trial's prediction, before it runs: the CSV then shows how good the model is."""
        model = self.fit() if any(r.trial.feed != FEED_MEMORY for r in runs) else None
        if model is None:
            return
        for run in runs:
            if run.trial.feed != FEED_MEMORY and run.predicted is None:
                run.predicted = model.predict(run.trial.loader_kwargs)

    def tie_with_model(self, contenders: Sequence[TrialRun]) -> None:
        """Pairs of contenders the model explains as equal (both hide the fetch: the workers outpace
        the loop on uncrowded cores, so its own time sets the pace; and they are predicted within
        the tolerance of each other) whose measurements agree within the spread between processes
        (the pooled spread of repeats; before any trial has two, the spread of the model's fit)."""
        model = self.fit()
        self.model_ties, self.tie_notes = frozenset(), ()
        if model is None or self.model_fell_back:
            return
        tolerance = self.spec.config.measure.tolerance
        if self.noise is not None:
            spread, source = self.noise.throughput_log_sd, "processes"
        else:
            spread, source = model.residual_log_sd, "model"
        ran = [run for run in contenders if run.score is not None and run.score.ran]
        predicted = {run.trial.name: model.predict(run.trial.loader_kwargs) for run in ran}
        ties, notes = set(), []
        for a, b in itertools.combinations(ran, 2):
            pa, pb = predicted[a.trial.name], predicted[b.trial.name]
            ratio = pb.throughput / pa.throughput
            measured = b.score.throughput.mean / a.score.throughput.mean
            judged = spread * math.sqrt(1 / max(a.repeats, 1) + 1 / max(b.repeats, 1))
            # Equal by the mechanism: both hide the fetch, the loop's own time sets the pace. Configs
            # the cores pace, or a close race of queues, can differ by more than the model can tell.
            if pa.fetch_hidden and pb.fetch_hidden and abs(ratio - 1) <= tolerance \
                    and abs(math.log(measured)) <= TIE_SPREADS * judged:
                ties.add(frozenset((a.trial.name, b.trial.name)))
                notes.append(ModelTie(a.trial.name, b.trial.name, ratio, measured, spread, source))
        self.model_ties, self.tie_notes = frozenset(ties), tuple(notes)

    def predicted_records(self) -> list[Record]:
        """Every config of the space (each combination of the swept values) that was not measured,
        with the final model's prediction: status `predicted`, never ranked or recommended."""
        model = self.fit()
        if model is None:
            return []
        cfg = self.spec.config
        accelerator = is_accelerator(self.device)
        measured = {config_key(run.trial) for run in self.runs.values() if run.trial.settings}
        out = []
        for trial in grid_plan(cfg, accelerator):
            if trial.skipped or config_key(trial) in measured or trial.name in self.runs:
                continue
            guess = model.predict(trial.loader_kwargs)
            out.append(trial_record(trial, self.context, round_no=None, status=Status.PREDICTED,
                                    reason="not measured: the pipeline model predicts it",
                                    predicted_throughput=guess.throughput, predicted_wait_ratio=guess.wait_ratio))
        return out

    def scored(self, name: str) -> Scored:
        """The trial's score as racing, ranking and the strategies see it: a trial flagged by the
        data check is as one that did not run."""
        run = self.runs.get(name)
        if run is None or run.score is None or run.flagged:
            return Scored(name, None, None)
        return run.score

    def throughput(self, name: str) -> float | None:
        run = self.runs.get(name)
        score = run.score if run is not None else None
        return score.throughput.mean if score is not None and score.throughput is not None else None

    def resume(self, records: Sequence[Record], ranks: Sequence[RankRecord] = ()) -> None:
        """Take records measured earlier for this config and machine as already done (with
        their per-rank records, with ranks)."""
        for record in records:
            self.runs[record.trial] = TrialRun(Trial(record.trial, record.changed or "", record.value, ()),
                                               record.round or 1, record=record,
                                               score=scored_from_record(record), resumed=True,
                                               rank_records=[r for r in ranks if r.trial == record.trial])

    # --- measuring ---------------------------------------------------------------------------

    def _job(self, trial: Trial) -> TrialJob:
        cfg = self.spec.config
        return TrialJob(trial, cfg.dataset, cfg.step, cfg.measure.model_copy(update={"repeats": 1}), self.device,
                        str(self.spec.base_dir), os.getpid(), multiprocessing.get_start_method(), self.spec.ranks,
                        scratch=self.scratch)

    def _finish(self, run: TrialRun) -> None:
        """Derive the trial's figures from its raw samples, write its record (appended the first
        time, the file rewritten when racing updates it), tell the watcher."""
        trial = run.trial
        first_time = run.record is None
        if run.resumed and run.record is not None and not run.measurements:
            # Kept from an earlier run, its samples not at hand: only what racing says of it now.
            run.record = dataclasses.replace(run.record, stopped_early=run.stopped_early or run.record.stopped_early)
        elif trial.skipped:
            run.record = trial_record(trial, self.context, round_no=run.round, status=Status.SKIPPED)
        elif run.failure is not None or not run.measurements:
            # A repeat that fails fails the trial: its other repeats do not make it sound.
            failure = run.failure or Outcome(Status.FAILED, "no repeat finished")
            run.score = None
            run.record = trial_record(trial, self.context, round_no=run.round, status=failure.status,
                                      reason=failure.reason, wall_s=failure.wall_s)
        else:
            measurement = _merge(run.measurements)
            stats = summarize(measurement, seed=_seed(trial.name), noise=self.noise)
            run.score = Scored(trial.name, stats.throughput, stats.wait_ratio, stats.throughput_draws,
                               stats.wait_ratio_draws, run.repeats, cost_of(trial.loader_kwargs))
            diagnosis = None
            if trial.feed != FEED_MEMORY:
                found = diagnose(trial.name, trial.loader_kwargs, measurement, stats, self.cores, self.sampled_ranks)
                diagnosis = found.columns
                run.score = dataclasses.replace(run.score, suggests=found.suggestions)
                self.notes.extend(w for w in found.warnings if w not in self.notes)
            run.record = trial_record(trial, self.context, round_no=run.round, wall_s=run.mean_wall_s,
                                      stats=stats, measurement=measurement, diagnosis=diagnosis,
                                      stopped_early=run.stopped_early, disturbed_repeats=run.disturbed,
                                      **_check_columns(run.check), **_predicted_columns(run.predicted))
            if self.files.per_rank is not None and measurement.ranks:
                run.rank_records = rank_records(trial, [(summarize(m), m) for m in measurement.ranks], self.context)
        if first_time:
            self.files.append(run.record, run.rank_records)
        else:
            self.rewrite()
        self.emit(events.TrialFinished(trial, run.record))

    def rewrite(self) -> None:
        """Both files rewritten whole (atomically) after a record changed."""
        self.files.replace(self.records, [r for run in self.runs.values() for r in run.rank_records])

    def _plan_runs(self, count: int) -> None:
        self.runs_planned += count
        self.emit(events.RunsPlanned(self.runs_planned))

    def measure(self, trials: Sequence[Trial], round_no: int) -> dict[str, Scored]:
        """Measure the trials not measured yet, `measure.min_repeats` repeats each, interleaved;
        stop those clearly behind (see race); the current score of every trial so far (racing may
        have stopped or failed earlier ones, and the data check flagged them). The repeats that
        decide the pick come once, after the last round (race): a round's winner only says where
        the next round sits, and contenders a later round overtakes need no more repeats."""
        m = self.spec.config.measure
        new: list[TrialRun] = []
        for trial in trials:
            if trial.name in self.runs:
                if self.runs[trial.name].resumed and not self.runs[trial.name].trial.settings:
                    self.runs[trial.name].trial = trial  # now known in full
                    self.emit(events.TrialFinished(trial, self.runs[trial.name].record, resumed=True))
                continue
            why = self.setup.shm_check(trial)
            run = TrialRun(dataclasses.replace(trial, skip_reason=why) if why else trial, round_no)
            self.runs[trial.name] = run
            if run.trial.skipped:
                self._finish(run)
            else:
                new.append(run)
        self._predict_new(new)
        # The ideal is a reference, not a contender: one repeat is enough.
        first = {run.trial.name: 1 if run.trial.feed == FEED_MEMORY else m.min_repeats for run in new}
        self._plan_runs(sum(first.values()))
        for repeat in range(1, max(first.values(), default=0) + 1):
            self._run_round([run for run in new if repeat <= first[run.trial.name]])
        self.race(more=False)
        return {name: self.scored(name) for name in self.runs}

    def _run_round(self, runs: Sequence[TrialRun]) -> None:
        """One more repeat of each run, in a shuffled order; each run's record is (re)made after,
        and the data checks and the pooled noise between processes once the round is done."""
        batch = [run for run in runs if run.failure is None]
        self.rng.shuffle(batch)
        for run in batch:
            self._run_once(run)
            self._finish(run)
        self.check_data()
        self.pool_noise()

    def pool_noise(self) -> None:
        """Pool the spread between repeats again; when it moved, every measured trial's intervals
        (its score and its record's bounds) are derived again with it."""
        measured = [(run, _merge(run.measurements)) for name, run in self.runs.items()
                    if name != IDEAL and run.failure is None and run.measurements and run.score is not None]
        noise = pooled_noise(measurement for _, measurement in measured)
        if noise == self.noise:
            return
        self.noise = noise
        for run, measurement in measured:
            stats = summarize(measurement, seed=_seed(run.trial.name), noise=noise)
            run.score = dataclasses.replace(run.score, throughput=stats.throughput, wait_ratio=stats.wait_ratio,
                                            throughput_draws=stats.throughput_draws,
                                            wait_ratio_draws=stats.wait_ratio_draws)
            if run.record is not None:
                run.record = Record.rounded(**{**run.record.to_dict(), **stats_columns(stats)})
        self.rewrite()

    # --- the data check ----------------------------------------------------------------------

    def _deliveries(self, run: TrialRun) -> tuple[Delivery | None, Delivery | None]:
        """What a trial delivered by its sampler's indices and by its samples' keys (None where
        it has none of the kind)."""
        if run.delivered is None or run.delivered[0] != run.repeats:
            measurement = _merge(run.measurements)
            run.delivered = (run.repeats, handed(sampled(measurement)),
                             delivery(streams(measurement), self.key_kind, self.spec.config.measure.epoch_batches))
        return run.delivered[1], run.delivered[2]

    def check_data(self) -> None:
        """Each measured trial's data check against the reference (the baseline, unless it repeats
        samples itself); a record whose check changed is rewritten (the baseline may be measured
        after a trial, and every new trial can move the reference)."""
        measured = {name: run for name, run in self.runs.items()
                    if name != IDEAL and not run.resumed and run.failure is None and run.measurements}
        found = {name: self._deliveries(run) for name, run in measured.items()}
        # By indices where every trial has them (a map-style dataset whose samplers hand out
        # integers); else every trial by its keys, as indices and keys do not compare.
        self.by_indices = bool(found) and all(indices is not None for indices, _ in found.values())
        pick = 0 if self.by_indices else 1
        deliveries = {name: both[pick] for name, both in found.items() if both[pick] is not None}
        least = min(deliveries.values(), key=lambda d: d.repeat_rate, default=None)
        self.repeating_sampler = least if self.by_indices and least is not None and least.repeated else None
        checks = check_all(deliveries, BASELINE)
        changed = False
        for name, run in measured.items():
            check = checks.get(name, Check(None, reason=self._unchecked_reason()))
            if check == run.check:
                continue
            run.check = check
            if run.record is not None and run.record.status == Status.OK:
                run.record = dataclasses.replace(run.record, **_check_columns(check))
                changed = True
        if changed:
            self.rewrite()

    def _unchecked_reason(self) -> str:
        if self.key_kind == LABEL:
            reason = ("the samples' bytes change from one read to the next (random augmentation?) and the batches "
                      "carry no 1-D integer tensor (labels or indices) to compare instead")
        else:
            reason = "the batches hold no tensor with one row per sample to take keys from"
        if self.iterable is False:
            return f"the sampler hands out indices that are not plain integers, and {reason}"
        return reason

    def data_findings(self) -> DataFindings:
        """The trials the data check flagged, with the fixes, and why some were not checked."""
        flagged = tuple(Flagged(name, run.check.verdict, run.check.reason, fixes(run.check, self.iterable))
                        for name, run in self.runs.items()
                        if run.check is not None and run.flagged and run.failure is None)
        flagged += tuple(Flagged(name, run.record.data_check, run.record.reason or "", ())
                         for name, run in self.runs.items() if run.check is None and run.flagged)
        checks = [run.check for run in self.runs.values() if run.check is not None]
        notes = []
        unchecked = [c for c in checks if c.verdict is None]
        if unchecked:
            notes.append(f"not checked for {len(unchecked)} of {len(checks)} trials: {unchecked[0].reason}")
        if self.key_kind == LABEL and not self.by_indices and len(unchecked) < len(checks):
            notes.append("the samples' bytes change from one read to the next (random augmentation?): trials "
                         "were compared by their labels or indices instead")
        if self.repeating_sampler is not None:
            least = self.repeating_sampler
            notes.append(f"the sampler hands out some indices twice within an epoch in every trial ({least.repeated} "
                         f"of {least.samples} in the trial that repeats least), so trials were compared with each "
                         "other: give each index once per epoch, unless that is by design (oversampling)")
        return DataFindings(flagged, tuple(notes))

    def _budget_left(self) -> bool:
        budget = self.spec.config.measure.budget_s
        if budget is not None and time.monotonic() - self.started >= budget:
            self.budget_spent = True
        return not self.budget_spent

    def race(self, more: bool = True) -> None:
        """Racing: trials clearly behind the leader stop (stopped_early), once the spread between
        processes is known (see pool_noise); with `more`, the pick and its strongest undecided
        rival get one more repeat each, interleaved, until the pick is decided, or the two reach
        `measure.repeats`, or the time budget runs out."""
        m = self.spec.config.measure
        while True:
            contenders = [run for run in self.runs.values() if run.score is not None and run.score.ran
                          and run.trial.name != IDEAL and not run.flagged]
            # Nothing is stopped before some trial has two repeats: until then, no interval shows
            # how much processes differ, and one slow process would stop a contender.
            behind = frozenset(run.trial.name for run in contenders if run.stopped_early)
            if more and self.use_model_ties:
                # Contenders the model and the data tie need no more repeats.
                self.tie_with_model([run for run in contenders if not run.stopped_early])
            step = race_step([run.score for run in contenders], m.tolerance, m.repeats, self.rank_by, behind,
                             may_stop=self.noise is not None, ties=self.model_ties)
            self.last_race = step
            for name in step.stop:
                stopped = self.runs[name]
                stopped.stopped_early = True
                if stopped.record is not None:  # only the flag changes: no figure to derive again
                    stopped.record = dataclasses.replace(stopped.record, stopped_early=True)
                    self.rewrite()
            if not more or step.decided or not step.again or not self._budget_left():
                return
            self._plan_runs(len(step.again))
            self._run_round([self.runs[name] for name in step.again])

    def advised(self, accelerator: bool) -> dict[str, list[Advised]]:
        """The settings each measured trial's advice names, with the trials that would show them."""
        cfg = self.spec.config
        out: dict[str, list[Advised]] = {}
        for name, run in self.runs.items():
            if run.score is None or not run.score.suggests:
                continue
            out[name] = [Advised(", ".join(f"{k}={v!r}" for k, v in change),
                                 on_top(cfg, run.trial, dict(change), accelerator).name,
                                 trial_for(cfg, dict(change), accelerator).name, BASELINE)
                         for change in run.score.suggests]
        return out

    def decision(self) -> Decision | None:
        step = self.last_race
        if step is None or step.pick is None:
            return None
        tolerance = self.spec.config.measure.tolerance
        ties = tuple(t.facing(step.pick) for t in self.tie_notes if step.pick in (t.pick, t.other))
        spread = self.noise.throughput_log_sd if self.noise is not None else None
        repeats = self.spec.config.measure.repeats
        if step.decided:
            return Decision(True, tolerance, step.pick, gap=tolerance, expected=step.expected, ties=ties,
                            spread=spread, repeats=repeats)
        kept = any(self.runs[name].resumed and not self.runs[name].measurements for name in step.undecided
                   if name in self.runs)
        ended_by = EndedBy.KEPT if kept else EndedBy.SHORTFALL if step.settled else \
            EndedBy.BUDGET if self.budget_spent else EndedBy.REPEATS
        if step.settled:
            why = (f"racing ended once the pick's expected shortfall against each contender left "
                   f"({step.expected:.1%} at most) was within the {tolerance:.0%} tolerance,")
        elif self.budget_spent:
            why = "the time budget (--budget) ran out"
        else:
            why = f"measure.repeats={self.spec.config.measure.repeats} ran out"
        remedy = "rerun with a smaller --tolerance to race closer calls" if step.settled else Decision.remedy
        return Decision(False, tolerance, step.pick, step.undecided, step.gap, why, step.expected, remedy, ties,
                        ended_by, spread, repeats)

    def _run_once(self, run: TrialRun) -> None:
        """One repeat; measured again (up to MAX_REDONE times) while other processes used more
        than measure.max_outside_cpu of the cores during its window."""
        m = self.spec.config.measure
        for attempt in range(MAX_REDONE + 1):
            self.emit(events.RunStarted(run.trial, run.repeats + 1, m.repeats))
            outcome = self.execute(self._job(run.trial), m.timeout_s)
            self.emit(events.RunFinished(run.trial, outcome))
            if outcome.result is None:
                run.failure = outcome
                return
            outside = outside_share(outcome.result, self.cores)
            if outside is None or outside <= m.max_outside_cpu or attempt == MAX_REDONE:
                run.measurements.append(outcome.result)
                run.walls_s.append(outcome.wall_s)
                return
            run.disturbed += 1
            self._plan_runs(1)
            self.emit(events.Notice(f"{run.trial.name}: other processes used {outside:.0%} of the cores during "
                                    f"a repeat (more than measure.max_outside_cpu={m.max_outside_cpu:g}): "
                                    "measuring it again"))

def _predicted_columns(predicted: Prediction | None) -> dict[str, Any]:
    """What the model predicted for a trial before it ran (nothing when there was no model yet)."""
    if predicted is None:
        return {}
    return {"predicted_throughput": predicted.throughput, "predicted_wait_ratio": predicted.wait_ratio}


def _check_columns(check: Check | None) -> dict[str, Any]:
    """A record's data_check and, when flagged, its reason: what is wrong."""
    if check is None:
        return {}
    flagged = check.verdict in DATA_FLAGGED
    return {"data_check": check.verdict, "reason": f"data_check {check.verdict}: {check.reason}" if flagged else ""}


def _seed(name: str) -> int:
    """Each trial's bootstrap draws its own resamples (the same each time for the same trial):
    two trials' draws must be independent for the ratio of their draws to mean anything."""
    return zlib.crc32(name.encode())


