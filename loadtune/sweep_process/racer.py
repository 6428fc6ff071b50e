"""The measuring stage: sets of trials measured with their repeats interleaved, each repeat in a
trial process of its own; racing gives more repeats only where the pick is not yet decided and
stops trials clearly behind. The racer schedules the repeats and stores what each gave; each
trial's figures are derived from its repeats (derive), the data check and the model read the
runs and return what they find."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from loadtune.asked.trials import BASELINE, FEED_MEMORY, IDEAL, Trial, counted_batches
from loadtune.core.kinds import MAX_REDONE, RankBy, Status
from loadtune.decide.choice import contends, fetches_alike, out_of_reach
from loadtune.decide.paired import Judged, PairedCall, PairedOutcome, judge, log_throughput, paired_spread
from loadtune.decide.ranking import scored_from_record
from loadtune.decide.selection import RaceStep, Scored, Ties, behind_bar, race_step, zone
from loadtune.decide.stats import ProcessNoise, pooled_noise
from loadtune.measure.diagnose import outside_share
from loadtune.record.findings import Finding
from loadtune.record.measurement import Behind
from loadtune.record.record import RankRecord, Record
from loadtune.record.samples import TrialSamples
from loadtune.sweep_process import events
from loadtune.sweep_process.checking import DataCheck
from loadtune.sweep_process.files import SweepFiles
from loadtune.sweep_process.launch import Outcome, run_in_trial_process
from loadtune.sweep_process.modelling import Modelling
from loadtune.sweep_process.setup import Setup
from loadtune.sweep_process.trial_run import (
    Deriving,
    Origin,
    Repeat,
    TrialRun,
    check_columns,
    derive,
    known_in_full,
    merged,
    noised_stats,
    placeholder,
    renoised,
    restored,
    samples_of,
)
from loadtune.trial_process.jobs import TrialJob

# Runs one trial job with a timeout: launch.run_in_trial_process, or torchrun's Cluster on every rank.
Executor = Callable[[TrialJob, float], Outcome]


@dataclass(frozen=True)
class RaceSettings:
    """How the racer orders and judges the repeats: the seed of its shuffles, what trials are
    ranked by, whether contenders the pipeline model and the data tie are left unraced (the
    model strategy), and a folder for the trials' own files, removed after the sweep."""

    seed: int = 0
    rank_by: RankBy = RankBy.THROUGHPUT
    use_model_ties: bool = False
    scratch: str | None = None
    bounds: bool = False  # a trial its workers cannot carry to the leader is not measured (choice.out_of_reach)


@dataclass
class Progress:
    """What the race has done so far: repeats planned, when it started, whether the time budget
    ran out, what diagnosing the trials found (threads oversubscribed), and the close calls
    measured in adjacent processes (the duels), by their pair of names."""

    runs_planned: int = 0
    started: float = field(default_factory=time.monotonic)
    budget_spent: bool = False
    notes: list[Finding] = field(default_factory=list)
    paired: dict[frozenset[str], PairedCall] = field(default_factory=dict)


class Racer:
    """Measures sets of trials with their repeats interleaved: round-robin over the trials in
    a shuffled order, one process per repeat, so slow drift of the machine favours none."""

    def __init__(self, setup: Setup, files: SweepFiles, settings: RaceSettings = RaceSettings(), *,
                 emit: events.OnEvent = events.ignore, execute: Executor = run_in_trial_process) -> None:
        self.setup, self.files, self.settings, self.emit, self.execute = setup, files, settings, emit, execute
        self.rng = random.Random(settings.seed)
        self.runs: dict[str, TrialRun] = {}
        self.progress = Progress()
        self.last_race: RaceStep | None = None
        # How much repeats differ between processes, pooled over the trials with two or more:
        # it widens the intervals of trials with few repeats (stats.summarize).
        self.noise: ProcessNoise | None = None
        self.model = Modelling(self.runs, setup.spec.config, emit)
        self.data = DataCheck(setup.info, setup.spec.config.measure.epoch_batches)

    @property
    def deriving(self) -> Deriving:
        """What deriving a trial's figures needs of the sweep: under torchrun the resource samples
        cover rank 0's process tree alone; the training run's epoch, else each trial's DataLoader's
        length."""
        spec = self.setup.spec
        return Deriving(self.setup.context, self.setup.sampled_cores, 1 if spec.torchrun else spec.ranks,
                        spec.config.measure.run_epoch_batches, self.files.per_rank is not None)

    # --- what is known ---------------------------------------------------------------------

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.runs.values() if r.record is not None]

    @property
    def rank_records(self) -> list[RankRecord]:
        """With ranks: each rank's own figures, every trial's."""
        return [r for run in self.runs.values() for r in run.rank_records]

    @property
    def trials(self) -> dict[str, Trial]:
        return {name: r.trial for name, r in self.runs.items()}

    def scored(self, name: str) -> Scored:
        """The trial's score as racing, ranking and the strategies see it: a trial flagged by the
        data check is as one that did not run."""
        run = self.runs.get(name)
        return run.contending if run is not None else Scored(name, None, None)

    def resume(self, records: Sequence[Record], ranks: Sequence[RankRecord] = ()) -> None:
        """Take records measured earlier for this config and machine as already done (with
        their per-rank records, with ranks)."""
        for record in records:
            name = record.trial or ""
            self.runs[name] = TrialRun(placeholder(name, record), record.run.round or 1, record=record,
                                       score=scored_from_record(record), origin=Origin.KEPT,
                                       rank_records=[r for r in ranks if r.trial == record.trial])

    def restore(self, stored: Sequence[tuple[TrialSamples, Record | None]]) -> None:
        """Trials kept with their raw samples: pending until the strategy asks for them again."""
        for samples, record in stored:
            self.runs[samples.trial] = restored(samples, record)

    def settle_pending(self) -> None:
        """Kept trials the strategy did not ask for again, taken up with their raw samples in their
        own rounds where the config still names them in full (known_in_full), so racing measures
        them further as in one sweep; the rest stay as recorded."""
        config, accelerator = self.setup.spec.config, self.setup.accelerator
        rounds: dict[int, list[Trial]] = {}
        for run in [run for run in self.runs.values() if run.pending]:
            trial = known_in_full(config, accelerator, run.trial.name, run.record)
            if trial is not None:
                rounds.setdefault(run.round, []).append(trial)
            elif run.record is not None:
                run.origin, run.score = Origin.KEPT, scored_from_record(run.record)
        for round_no, trials in sorted(rounds.items()):
            self.measure(trials, round_no)

    # --- writing -------------------------------------------------------------------------------

    def _finish(self, run: TrialRun) -> None:
        """Derive the trial's figures from its repeats, write its record (appended the first
        time, the file rewritten when racing updates it), tell the watcher."""
        first_time = run.record is None
        derived = derive(run, self.noise, self.deriving)
        run.score, run.record, run.rank_records = derived.score, derived.record, list(derived.rank_records)
        for warning in derived.warnings:
            if warning not in self.progress.notes:
                self.progress.notes.append(warning)
        if first_time:
            self.files.append(derived.record, run.rank_records)
        else:
            self.rewrite()
        self.store()
        self.emit(events.TrialFinished(run.trial, derived.record))

    def store(self) -> None:
        """The raw samples of every trial measured (or kept with them), beside the CSV."""
        self.files.store([samples_of(run) for run in self.runs.values() if run.done or run.failure])

    def rewrite(self) -> None:
        """Both files rewritten whole (atomically) after a record changed."""
        self.files.replace(self.records, self.rank_records)

    # --- measuring ---------------------------------------------------------------------------

    def _job(self, run: TrialRun) -> TrialJob:
        """The trial's next repeat, as its process runs it: only its first window may end early
        (_behind); a later one is asked for by the race, to decide it, and runs whole."""
        spec, trial = self.setup.spec, run.trial
        cfg = spec.config
        measure = {"repeats": 1, "batches": counted_batches(trial.name, cfg.measure)}
        return TrialJob(trial, cfg.dataset, cfg.step, cfg.measure.model_copy(update=measure),
                        self.setup.device, str(spec.base_dir), os.getpid(), multiprocessing.get_start_method(),
                        spec.ranks, scratch=self.settings.scratch,
                        behind=None if run.repeats else self._behind(trial))

    def _behind(self, trial: Trial) -> Behind | None:
        """When the trial's window may end early, clearly behind the leader so far (decide's
        behind_bar): ranked by throughput on one rank, never the baseline (every figure is set
        against it, and the start of a window reads a slow config faster than its whole epoch) or
        the ideal, and not before a contender has run."""
        spec = self.setup.spec
        if trial.name == BASELINE or trial.feed == FEED_MEMORY or spec.ranks > 1 or spec.torchrun \
                or self.settings.rank_by != RankBy.THROUGHPUT:
            return None
        leaders = [score.measured_throughput.mean for name, run in self.runs.items()
                   if name != trial.name and (score := run.score) is not None and not run.stopped_early
                   and contends(name, score.ran, run.flagged)]
        if not leaders:
            return None
        return Behind(behind_bar(max(leaders), spec.config.measure.tolerance, self.spread))

    def _plan_runs(self, count: int) -> None:
        self.progress.runs_planned += count
        self.emit(events.RunsPlanned(self.progress.runs_planned))

    def measure(self, trials: Sequence[Trial], round_no: int) -> dict[str, Scored]:
        """Measure the trials not measured yet, `measure.min_repeats` repeats each, interleaved;
        stop those clearly behind (see race); the score of every trial so far but those kept by
        --resume that no strategy asked for again yet (to the strategy, still to measure). The
        repeats that decide the pick come once, after the last round (race): a round's winner only
        says where the next round sits."""
        new, kept = self._take(trials, round_no)
        # Predicted from the trials measured before these, as they were when the kept ones ran.
        for name, prediction in self.model.predict_new([run.trial for run in new if run.predicted is None]).items():
            self.runs[name].predicted = prediction
        for run in kept:
            run.origin = Origin.LIVE
            self._finish(run)
        todo = [*kept, *new]
        # The ideal is a reference, not a contender: one repeat is enough.
        first = {run.trial.name: 1 if run.trial.feed == FEED_MEMORY else self.setup.spec.config.measure.min_repeats
                 for run in todo}
        self._plan_runs(sum(max(first[run.trial.name] - run.repeats, 0) for run in todo))
        if kept:
            self.check_data()
            self.pool_noise()
        while batch := [run for run in todo if run.failure is None and not run.stopped_early
                        and not run.trial.skipped and run.repeats < first[run.trial.name]]:
            self._run_round(batch)
        self.race(more=False)
        return {name: self.scored(name) for name, run in self.runs.items() if not run.pending}

    def _take(self, trials: Sequence[Trial], round_no: int) -> tuple[list[TrialRun], list[TrialRun]]:
        """The runs of the trials asked for: new ones (a trial /dev/shm cannot hold is skipped at
        once), and those kept with their raw samples by --resume, now known in full."""
        new, kept = [], []
        for trial in trials:
            run = self.runs.get(trial.name)
            if run is not None and run.pending:
                run.trial, run.round = trial, round_no
                kept.append(run)
            elif run is not None:
                if run.resumed and not run.trial.settings and run.record is not None:
                    run.trial = trial  # now known in full
                    self.emit(events.TrialFinished(trial, run.record, resumed=True))
            else:
                why = self.setup.shm_check(trial)
                run = TrialRun(dataclasses.replace(trial, skip_reason=why) if why else trial, round_no)
                self.runs[trial.name] = run
                if run.trial.skipped:
                    self._finish(run)
                else:
                    new.append(run)
        return new, kept

    def _run_round(self, runs: Sequence[TrialRun], shuffle: bool = True) -> None:
        """One more repeat of each run, in a shuffled order (or as given); each run's record is
        (re)made after, and the data checks and the pooled noise between processes once the round is
        done."""
        batch = [run for run in runs if run.failure is None]
        if shuffle:
            self.rng.shuffle(batch)
        # A first round: the baseline first while it has no figure, then the likely leaders (the
        # model's, else the most workers), as a trial clearly behind what ran before it ends its
        # window early (_behind).
        if not any(run.repeats for run in batch):
            batch.sort(key=lambda run: (run.trial.name != BASELINE or run.score is not None,
                                        -(run.predicted.throughput if run.predicted is not None else 0.0),
                                        -int(run.trial.loader_kwargs.get("num_workers") or 0)))
        for run in batch:
            why = self._out_of_reach(run) if not run.repeats else None
            if why is None:
                self._run_once(run)
            else:
                run.trial = dataclasses.replace(run.trial, skip_reason=why)
                self._plan_runs(-1)
            self._finish(run)
        self.check_data()
        self.pool_noise()

    def _out_of_reach(self, run: TrialRun) -> str | None:
        """Why the trial need not run: a config measured in full whose fetch time bounds it
        (fetches_alike, out_of_reach) below the bar to contend (_behind; model strategy); else None."""
        behind = self._behind(run.trial) if self.settings.bounds else None
        kwargs = run.trial.loader_kwargs
        if behind is None or run.trial.feed == FEED_MEMORY:
            return None
        for other in self.runs.values():
            record = other.record
            if other is run or other.flagged or record is None or not record.ran or not record.assessment.fetch_ms:
                continue
            # Its windows whole (racing may stop one measured in full; kept without samples, not known).
            whole = not other.cut_short if other.done else not record.measuring.stopped_early
            if whole and fetches_alike(kwargs, other.trial.loader_kwargs) and (why := out_of_reach(
                    int(kwargs["num_workers"]), int(kwargs["batch_size"]), record.assessment.fetch_ms,
                    behind.bar_samples_per_s, other.trial.name)) is not None:
                return why
        return None

    def check_data(self) -> None:
        """Each measured trial's data check kept on its run; a record whose check changed is
        rewritten (the baseline may be measured after a trial, and every new trial can move the
        reference)."""
        changed = False
        for name, check in self.data.check(self.runs).items():
            run = self.runs[name]
            if check == run.check:
                continue
            run.check = check
            if run.record is not None and run.record.status == Status.OK:
                run.record = run.record.with_columns(**check_columns(check))
                changed = True
        if changed:
            self.rewrite()

    def pool_noise(self) -> None:
        """Pool the spread between repeats again; when it moved, every measured trial's intervals
        (its score and its record's bounds) are derived again with it."""
        measured = [(run, score, merged(run.measurements)) for name, run in self.runs.items()
                    if name != IDEAL and run.failure is None and run.done and (score := run.score) is not None]
        run_epoch = self.setup.spec.config.measure.run_epoch_batches
        noise = pooled_noise((measurement for _, _, measurement in measured), run_epoch)
        if noise == self.noise:
            return
        self.noise = noise
        for run, score, measurement in measured:
            run.score, run.record = renoised(score, run.record, noised_stats(measurement, run.trial.name, noise,
                                                                             run_epoch))
        self.rewrite()

    def _budget_left(self) -> bool:
        budget = self.setup.spec.config.measure.budget_s
        if budget is not None and time.monotonic() - self.progress.started >= budget:
            self.progress.budget_spent = True
        return not self.progress.budget_spent

    # --- racing --------------------------------------------------------------------------------

    def race(self, more: bool = True) -> None:
        """Racing: trials clearly behind the leader stop (stopped_early), once the spread between
        processes is known (see pool_noise); with `more`, the pick and its strongest undecided
        rival get one more repeat each, interleaved, until the pick is decided, or the two reach
        `measure.repeats`, or the time budget runs out."""
        while True:
            if more and self._budget_left():
                self._revive()
            step = self._race_step(more)
            self.last_race = step
            self._stop(step.stop)
            if not more or step.decided or not step.again or not self._budget_left():
                return
            self._plan_runs(len(step.again))
            if len(step.again) == 2 and self._pairable():
                self._run_pair(step.again[0], step.again[1])
            else:
                self._run_round([self.runs[name] for name in step.again])

    def _revive(self) -> None:
        """Trials whose first window ended early against a leader's figure that has since fallen
        (what they ran reaches the bar of the leader now: _behind) run a whole window in place of
        the cut one and contend again: one process's reading set the bar that cut them."""
        runs = [run for run in self.runs.values() if run.cut_short and run.repeats == 1 and run.live
                and run.failure is None and run.score is not None and run.score.ran
                and (behind := self._behind(run.trial)) is not None
                and run.score.measured_throughput.mean >= behind.bar_samples_per_s]
        for run in runs:
            run.stopped_early = False
        if runs:
            self._plan_runs(len(runs))
            self._run_round(runs)

    def _race_step(self, more: bool) -> RaceStep:
        """Where the race stands among the contenders (choice.contends), after the close calls
        settled in pairs: a config shown behind its rival stops."""
        self._stop_paired_behind()
        m, use_ties = self.setup.spec.config.measure, self.settings.use_model_ties
        scores = {name: run.score for name, run in self.runs.items() if run.score is not None}
        contenders = [self.runs[name] for name, score in scores.items()
                      if contends(name, score.ran, self.runs[name].flagged)]
        # Nothing is stopped before some trial has two repeats: until then, no interval shows
        # how much processes differ, and one slow process would stop a contender.
        behind = frozenset(run.trial.name for run in contenders if run.stopped_early)
        if more and use_ties:
            # Contenders the model and the data tie need no more repeats.
            self.model.tie([run for run in contenders if not run.stopped_early], self.noise)
        return race_step([scores[run.trial.name] for run in contenders], m.tolerance, m.repeats,
                         self.settings.rank_by, behind, may_stop=self.noise is not None, ties=self.ties,
                         disputes=self._disputes if use_ties else None, spread=self.spread,
                         ideal=scores.get(IDEAL))

    # --- close calls in pairs ------------------------------------------------------------------

    def _pairable(self) -> bool:
        """Whether a duel is measured in pairs of adjacent processes: ranked by throughput (a
        ratio), on this machine alone."""
        spec = self.setup.spec
        return self.settings.rank_by == RankBy.THROUGHPUT and spec.ranks == 1 and not spec.torchrun

    def _run_pair(self, a: str, b: str) -> None:
        """One more repeat of each of the two, one right after the other, the first of them drawn
        for the first pair and alternating from then on (ABBA); the pair's log ratio kept when both
        measured it whole."""
        key = frozenset((a, b))
        call = self.progress.paired.get(key) or PairedCall(*((a, b) if self.rng.random() < 0.5 else (b, a)))
        order = (call.first, call.second) if len(call.log_ratios) % 2 == 0 else (call.second, call.first)
        runs = [self.runs[name] for name in order]
        before = [len(run.done) for run in runs]
        self._run_round(runs, shuffle=False)
        logs = {run.trial.name: log_throughput(run.done[-1].measurement, self.deriving.run_epoch)
                for run, count in zip(runs, before) if run.failure is None and len(run.done) == count + 1}
        first, second = logs.get(call.first), logs.get(call.second)
        if first is not None and second is not None:
            self.progress.paired[key] = call.plus(second - first)

    def judged_pairs(self) -> list[Judged]:
        """Every close call measured in pairs, judged at the zone with the paired spread pooled over
        them (paired.judge); none before the spread between processes is known, or two pairs."""
        spread = paired_spread(list(self.progress.paired.values()))
        if self.noise is None or spread is None:
            return []
        m = self.setup.spec.config.measure
        width = zone(m.tolerance, self.spread, m.repeats)
        return [j for call in self.progress.paired.values() if (j := judge(call, width, *spread)) is not None]

    @property
    def ties(self) -> Ties:
        """The pairs tied: by the model and the data, or shown equal within the zone in pairs."""
        paired = {frozenset((j.call.first, j.call.second)) for j in self.judged_pairs()
                  if j.outcome == PairedOutcome.EQUAL}
        return self.model.ties | frozenset(paired)

    def _stop_paired_behind(self) -> None:
        """A config its paired rival is shown ahead of by more than the zone stops, as one clearly
        behind the leader does."""
        losers = [judged.call.second if judged.outcome == PairedOutcome.FIRST_AHEAD else judged.call.first
                  for judged in self.judged_pairs()
                  if judged.outcome in (PairedOutcome.FIRST_AHEAD, PairedOutcome.SECOND_AHEAD)]
        self._stop([name for name in dict.fromkeys(losers)
                    if (run := self.runs.get(name)) is not None and run.failure is None and not run.stopped_early])

    def _stop(self, names: Sequence[str]) -> None:
        """Racing stops these trials: only the flag changes (no figure to derive again), in the
        records and the raw samples beside them."""
        for name in names:
            run = self.runs[name]
            run.stopped_early = True
            if run.record is not None:
                run.record = run.record.with_columns(stopped_early=True)
        if names:
            self.rewrite()
            self.store()

    @property
    def spread(self) -> float | None:
        """The spread between processes on the ranking's scale (log throughput, or the wait
        ratio), pooled over the sweep; None before it is known."""
        if self.noise is None:
            return None
        return self.noise.wait_ratio_sd if self.settings.rank_by == RankBy.WAIT_RATIO else \
            self.noise.throughput_log_sd

    def _disputes(self, a: str, b: str) -> bool:
        """The model predicts trial `a` ahead of `b` by more than the tolerance and its own error."""
        return self.model.ahead(self.runs[a].trial, self.runs[b].trial, self.settings.rank_by)

    def _run_once(self, run: TrialRun) -> None:
        """One repeat; measured again (up to MAX_REDONE times) while other processes used more
        than measure.max_outside_cpu of the cores during its window."""
        m = self.setup.spec.config.measure
        for attempt in range(MAX_REDONE + 1):
            self.emit(events.RunStarted(run.trial, run.next_repeat, m.repeats))
            outcome = self.execute(self._job(run), m.timeout_s)
            self.emit(events.RunFinished(run.trial, outcome))
            if outcome.result is None:
                run.failure = outcome
                return
            outside = outside_share(outcome.result, self.setup.sampled_cores)
            if outside is None or outside <= m.max_outside_cpu or attempt == MAX_REDONE:
                # A whole window replaces one cut short (a trial revived: _revive).
                run.done = [*run.whole, Repeat(outcome.result, outcome.wall_s)]
                run.stopped_early = run.stopped_early or outcome.result.behind
                return
            run.disturbed += 1
            self._plan_runs(1)
            self.emit(events.Notice(f"{run.trial.name}: other processes used {outside:.0%} of the cores during "
                                    f"a repeat (more than measure.max_outside_cpu={m.max_outside_cpu:g}): "
                                    "measuring it again"))
