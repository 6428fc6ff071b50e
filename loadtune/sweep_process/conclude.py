"""After the last repeat: what the race left (Raced), concluded into the trials ranked, each
advice checked against what was measured, the findings, how sure the pick is, and the summary:
one SweepResult, from which the CSV (write_result), the table, `--json` and the chart are
rendered."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Mapping, Sequence

from loadtune.asked.config import Config, RunSpec
from loadtune.asked.options import SweepOptions, default_output
from loadtune.asked.plan import on_top, trial_for
from loadtune.asked.trials import BASELINE, IDEAL, Trial
from loadtune.core.errors import ResultsError
from loadtune.core.kinds import RankBy
from loadtune.decide.advice import Advised, with_checked_advice
from loadtune.decide.choice import picked, recommended
from loadtune.decide.decision import Decision, Resolving, ended, ended_words, write_decision
from loadtune.decide.ranking import apply_ranking, rank
from loadtune.decide.selection import Scored, Ties, order, throughput_ratios
from loadtune.decide.stats import rerun_interval
from loadtune.model.model import ModelReport
from loadtune.model.predict import settings_of, travel
from loadtune.present.summary import Summary, noise_warnings
from loadtune.present.summary_parts import DataFindings, Elsewhere, Findings, Labels, OneRank, OnRanks, Pick, Standing
from loadtune.present.sweep import SweepResult
from loadtune.record.findings import BusyMachine, Disagreement, Finding, WorkersBeyondCores
from loadtune.record.record import RankRecord, Record, rank_file, read_records
from loadtune.record.watched import LoaderInfo, plain_settings, write_loader_info
from loadtune.sweep_process.files import SweepFiles
from loadtune.sweep_process.racer import Racer
from loadtune.sweep_process.setup import Setup
from loadtune.sweep_process.trial_run import TrialRun


@dataclass(frozen=True)
class Raced:
    """What the race leaves to conclude from: the setup (the config, the machine), where the CSV
    goes, every trial's run by name, racing's decision, what diagnosing the trials found, the
    contenders the model and the data tied, the configs only predicted, the settings each
    trial's advice names, what the data check found, and the pipeline model's report."""

    setup: Setup
    out_path: Path
    runs: Mapping[str, TrialRun]
    decision: Decision | None
    notes: tuple[Finding, ...] = ()
    ties: Ties = frozenset()
    predicted: tuple[Record, ...] = ()
    advised: Mapping[str, list[Advised]] = field(default_factory=dict)
    data: DataFindings | None = None
    model: ModelReport | None = None

    @property
    def trials(self) -> dict[str, Trial]:
        return {name: run.trial for name, run in self.runs.items()}


def raced(runner: Racer) -> Raced:
    """Where the racer's sweep stands, as one value."""
    setup = runner.setup
    return Raced(setup, runner.files.out_path, dict(runner.runs), decision(runner), tuple(runner.progress.notes),
                 runner.ties, tuple(runner.model.predicted_records(setup.accelerator, setup.context)),
                 advised(runner.runs, setup.spec.config, setup.accelerator), runner.data.findings(runner.runs),
                 runner.model.report())


def decision(runner: Racer) -> Decision | None:
    """How sure the last step of the race left the pick (None before any trial ran): decided, or
    not, with the contenders still undecided and what ended the racing."""
    step = runner.last_race
    if step is None or step.pick is None:
        return None
    measure = runner.setup.spec.config.measure
    ties = tuple(t.facing(step.pick) for t in runner.model.tie_notes if step.pick in (t.pick, t.other))
    paired = tuple(j.facing(step.pick) if step.pick in (j.call.first, j.call.second) else j
                   for j in runner.judged_pairs())
    known = runner.noise is not None
    resolving = Resolving(runner.spread, measure.repeats, step.zone if known else None,
                          step.bound if known and math.isfinite(step.bound) else None)
    if step.decided:
        return Decision(True, measure.tolerance, step.pick, gap=step.zone, expected=step.expected,
                        ties=ties, equal=step.equal, resolving=resolving, paired=paired)
    kept = any(runner.runs[name].resumed for name in step.undecided if name in runner.runs)
    ended_by = ended(kept, runner.progress.budget_spent)
    return Decision(False, measure.tolerance, step.pick, step.undecided, step.gap,
                    ended_words(ended_by, measure.repeats), step.expected, ties=ties, ended_by=ended_by,
                    equal=step.equal, resolving=resolving, paired=paired)


def advised(runs: Mapping[str, TrialRun], config: Config, accelerator: bool) -> dict[str, list[Advised]]:
    """The settings each measured trial's advice names, with the trials that would show them."""
    out: dict[str, list[Advised]] = {}
    for name, run in runs.items():
        if run.score is None or not run.score.suggests:
            continue
        out[name] = [Advised(", ".join(f"{k}={v!r}" for k, v in change),
                             on_top(config, run.trial, dict(change), accelerator).name,
                             trial_for(config, dict(change), accelerator).name, BASELINE)
                     for change in run.score.suggests]
    return out


def conclude(options: SweepOptions, race: Raced) -> SweepResult:
    """The finished sweep: records ranked, advice checked, the findings, the summary (write_result
    writes its files)."""
    setup, cfg = race.setup, race.setup.spec.config
    judged = race.decision
    records = tuple(ranked(race.runs, options.rank_by, judged.zone if judged else cfg.measure.tolerance, race.ties,
                           judged.pick if judged else None, judged is not None and judged.decided)) + race.predicted
    if judged is not None:
        # What the answer calls equal is what the table marks '=1' (tied_with_best): one definition.
        judged = dataclasses.replace(judged, equal=tuple(
            r.trial or "" for r in records if r.assessment.tied_with_best and r.trial != judged.pick))
    records = tuple(with_checked_advice(records, race.advised, cfg.measure.tolerance))
    disturbed = tuple((r.trial or "", r.measuring.disturbed_repeats) for r in records if r.measuring.disturbed_repeats)
    busy = [BusyMachine(disturbed, cfg.measure.max_outside_cpu)] if disturbed else []
    # Warnings ask the user to do something; notes inform (shown with --verbose).
    warnings: tuple[Finding, ...] = (*race.notes, *busy)
    notes: tuple[Finding, ...] = (*workers_beyond_cores(race.trials.values(), setup.cores, setup.host_ranks),
                                  *noise_warnings(records), *disagreement(race.runs, records))
    scores = {name: run.score for name, run in race.runs.items() if run.score is not None}
    found = Findings(warnings, notes, race.data, race.model)
    summary = summarize(options, setup.spec, Chosen(records, race.trials, judged, scores),
                        labels(options, setup.spec, race.out_path, setup.device), found)
    return SweepResult(race.out_path, records, summary, race.trials)


def write_result(files: SweepFiles, result: SweepResult, rank_records: Sequence[RankRecord]) -> None:
    """The finished sweep's files: the CSV (and per-rank CSV) rewritten with its rows, and the
    loader's other settings (shuffle, drop_last, ...) beside it: `loadtune predict`'s paste line
    carries them as the sweep's own does; and how sure the pick is (NAME.decision.json), for
    `loadtune report` to end with the sweep's own answer."""
    files.replace(result.records, rank_records)
    write_loader_info(result.out_path, {name: LoaderInfo(loader_kwargs=plain_settings(trial.loader_kwargs))
                                        for name, trial in result.trials.items()})
    write_decision(result.out_path, result.decision, result.recommended,
                   (result.summary.pick.speedup_lo, result.summary.pick.speedup_hi))


def ranked(runs: Mapping[str, TrialRun], rank_by: RankBy, tolerance: float, ties: Ties = frozenset(),
           pick: str | None = None, decided: bool = False) -> list[Record]:
    """The runs' records ranked (apply_ranking) at the zone the pick was judged at (`tolerance`),
    the pick among the best; the ideal a reference, not ranked. Once the pick is decided, configs
    racing did not stop whose estimates lie within the zone of the best's share its rank (rank's
    `unresolved`): the pick does not turn on them, and the sweep did not resolve them."""
    records = [run.record for run in runs.values() if run.record is not None]
    unresolved = frozenset(name for name, run in runs.items() if decided and not run.stopped_early)
    placings = rank([scored(runs, r.trial or "") for r in records if r.trial != IDEAL], rank_by, tolerance, ties,
                    pick, frozenset(name for name, run in runs.items() if run.cut_short), unresolved)
    return apply_ranking(records, placings, throughput(runs, BASELINE), throughput(runs, IDEAL), pick)


def scored(runs: Mapping[str, TrialRun], name: str) -> Scored:
    """A trial's score as ranking sees it: one flagged by the data check is as one that did not run."""
    run = runs.get(name)
    return run.contending if run is not None else Scored(name, None, None)


def throughput(runs: Mapping[str, TrialRun], name: str) -> float | None:
    run = runs.get(name)
    score = run.score if run is not None else None
    return score.throughput.mean if score is not None and score.throughput is not None else None


def workers_beyond_cores(trials: Collection[Trial], cores: int, ranks: int = 1) -> list[WorkersBeyondCores]:
    most = max((t.loader_kwargs.get("num_workers", 0) for t in trials), default=0) * ranks
    return [WorkersBeyondCores(most, cores, ranks)] if most > cores else []


def disagreement(runs: Mapping[str, TrialRun], records: Sequence[Record]) -> list[Disagreement]:
    """Said when the lowest wait ratio is not among the fastest trials."""
    ranked_scores = [scored(runs, r.trial or "") for r in records if r.trial != IDEAL and r.rank is not None]
    if len(ranked_scores) < 2:
        return []
    lean = order(ranked_scores, RankBy.WAIT_RATIO)[0].name
    if lean in {r.trial for r in records if r.assessment.tied_with_best}:
        return []
    return [Disagreement(lean)]


@dataclass(frozen=True)
class Chosen:
    """What the pick is made from: the ranked rows, the trials as asked (by name), racing's
    decision, and each trial's score (its draws give the speedup's interval)."""

    records: Sequence[Record]
    trials: Mapping[str, Trial]
    decision: Decision | None
    scores: Mapping[str, Scored]


def labels(options: SweepOptions, spec: RunSpec, out_path: Path, device: str) -> Labels:
    """What was swept, and where."""
    kwarg = spec.config.dataset.scale_kwarg
    return Labels(str(out_path), spec.name, spec.scale,
                  f"dataset.kwargs.{kwarg} = {spec.config.dataset.kwargs[kwarg]}" if kwarg else None, device,
                  str(options.rank_by), str(options.strategy), spec.source, spec.config.dataset.factory)


def on_ranks(options: SweepOptions, spec: RunSpec, out_path: Path) -> OnRanks:
    """With ranks, the one-rank sweep of the same config beside it, and the per-rank file."""
    if spec.ranks <= 1:
        return OnRanks(spec.ranks)
    return OnRanks(spec.ranks, one_rank(spec), str(rank_file(out_path)), options.output.out is not None, spec.torchrun)


def summarize(options: SweepOptions, spec: RunSpec, chosen_from: Chosen, about: Labels, found: Findings) -> Summary:
    """The summary the CLI prints and the API returns: the recommendation, what to change, how
    sure, and with ranks the one-rank sweep of the same config beside it."""
    records, trials = chosen_from.records, chosen_from.trials
    chosen = picked(records, chosen_from.decision.pick if chosen_from.decision is not None else None)
    elsewhere = Elsewhere()
    speedup: tuple[float | None, float | None] = (None, None)
    if chosen is not None:
        speedup = speedup_interval(chosen_from.scores, chosen.trial)
        # Fitted again as `loadtune predict` fits it (whole epochs, as training runs them), so the
        # line agrees with the command it points to.
        moved, same = travel(records, settings_of(chosen), spec.config.measure.tolerance)
        elsewhere = Elsewhere(tuple(moved), tuple(same))
    chosen_trial = trials.get(chosen.trial or "") if chosen is not None else None
    baseline = trials.get(BASELINE)
    pick = Pick.of(chosen_trial.loader_kwargs if chosen_trial else None,
                   baseline.loader_kwargs if baseline is not None and baseline.settings else None, speedup)
    return Summary(about, Standing.of(records, chosen), pick, chosen_from.decision, found,
                   on_ranks(options, spec, Path(about.output)), elsewhere)


def speedup_interval(scores: Mapping[str, Scored], trial: str | None) -> tuple[float | None, float | None]:
    """The 95% interval a rerun's speedup of `trial` over the baseline lands in, from the two
    trials' draws (drawn independently; see stats.rerun_interval); (None, None) where either has
    none."""
    a, b = scores.get(trial or ""), scores.get(BASELINE)
    if a is None or b is None or trial == BASELINE or not a.ran or not b.ran:
        return None, None
    ratios = throughput_ratios(a, b)
    if ratios is None:
        return None, None
    interval = rerun_interval(a.measured_throughput.mean / b.measured_throughput.mean, ratios)
    return interval.lo, interval.hi


def one_rank(spec: RunSpec) -> OneRank:
    """The one-rank sweep of the same config and scale, when its CSV is where a plain
    `loadtune sweep` writes it: its recommendation, to set beside the ranks' one."""
    path = default_output(dataclasses.replace(spec, ranks=1))
    try:
        records = [r for r in read_records(path) if r.run.config_sha == spec.sha and r.run.scale == spec.scale
                   and (r.measuring.ranks or 1) == 1]
    except ResultsError:  # unreadable: as if it were not there
        records = []
    chosen = recommended(records)
    if chosen is None or chosen.throughput is None:
        return OneRank(str(path))
    return OneRank(str(path), chosen.trial, chosen.throughput)
