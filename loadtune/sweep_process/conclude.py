"""After the last repeat: the trials ranked, each advice checked against what was measured, the
findings, how sure the pick is, and the summary: one SweepResult, from which the CSV, the
table, `--json` and the chart are rendered."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

from loadtune.config import RunSpec
from loadtune.errors import ResultsError
from loadtune.kinds import RankBy
from loadtune.options import SweepOptions, default_output
from loadtune.results.advice import with_checked_advice
from loadtune.results.choice import recommended
from loadtune.results.findings import BusyMachine, Disagreement, Finding, WorkersBeyondCores
from loadtune.results.record import Record, rank_file, read_records
from loadtune.results.summary import Summary, noise_warnings
from loadtune.results.summary_parts import Elsewhere, Findings, Labels, OneRank, OnRanks, Pick, Standing
from loadtune.results.sweep import Decision, SweepResult
from loadtune.results.transfer import settings_of, travel
from loadtune.results.watched import LoaderInfo, plain_settings, write_loader_info
from loadtune.sweep_process.decide import Scored, order, throughput_ratios
from loadtune.sweep_process.racer import Racer
from loadtune.sweep_process.ranking import rank
from loadtune.sweep_process.records import apply_ranking
from loadtune.sweep_process.stats import rerun_interval
from loadtune.trials import BASELINE, IDEAL, Trial


def conclude(options: SweepOptions, runner: Racer) -> SweepResult:
    """The finished sweep: records ranked, advice checked, the CSV rewritten, the summary."""
    setup, cfg = runner.setup, runner.spec.config
    predicted = runner.model.predicted_records(setup.accelerator, runner.context)
    records = tuple(ranked(runner, options.rank_by)) + tuple(predicted)
    records = tuple(with_checked_advice(records, runner.advised(setup.accelerator), cfg.measure.tolerance))
    disturbed = tuple((r.trial or "", r.disturbed_repeats) for r in records if r.disturbed_repeats)
    busy = [BusyMachine(disturbed, cfg.measure.max_outside_cpu)] if disturbed else []
    # Warnings ask the user to do something; notes inform (shown with --verbose).
    warnings: tuple[Finding, ...] = (*runner.notes, *busy)
    notes: tuple[Finding, ...] = (*workers_beyond_cores(runner.trials.values(), setup.cores, setup.host_ranks),
                                  *noise_warnings(records), *disagreement(runner, records))
    runner.files.replace(records, runner.rank_records)
    # The loader's other settings (shuffle, drop_last, ...) beside the CSV: `loadtune predict`'s
    # paste line carries them as the sweep's own does.
    write_loader_info(runner.files.out_path, {name: LoaderInfo(loader_kwargs=plain_settings(trial.loader_kwargs))
                                              for name, trial in runner.trials.items()})
    scores = {name: run.score for name, run in runner.runs.items() if run.score is not None}
    found = Findings(warnings, notes, runner.data.findings(), runner.model.report())
    summary = summarize(options, runner.spec, Chosen(records, runner.trials, runner.decision(), scores),
                        labels(options, runner.spec, runner.files.out_path, setup.device), found)
    return SweepResult(runner.files.out_path, records, summary, runner.trials)


def ranked(runner: Racer, rank_by: RankBy) -> list[Record]:
    scored = [runner.scored(r.trial or "") for r in runner.records if r.trial != IDEAL]
    placings = rank(scored, rank_by, runner.spec.config.measure.tolerance, runner.model.ties)
    return apply_ranking(runner.records, placings, runner.throughput(BASELINE), runner.throughput(IDEAL))


def workers_beyond_cores(trials: Collection[Trial], cores: int, ranks: int = 1) -> list[WorkersBeyondCores]:
    most = max((t.loader_kwargs.get("num_workers", 0) for t in trials), default=0) * ranks
    return [WorkersBeyondCores(most, cores, ranks)] if most > cores else []


def disagreement(runner: Racer, records: Sequence[Record]) -> list[Disagreement]:
    """Said when the lowest wait ratio is not among the fastest trials."""
    scored = [runner.scored(r.trial or "") for r in records if r.trial != IDEAL and r.rank is not None]
    if len(scored) < 2:
        return []
    lean = order(scored, RankBy.WAIT_RATIO)[0].name
    if lean in {r.trial for r in records if r.tied_with_best}:
        return []
    return [Disagreement(lean)]


def chosen_record(records: Sequence[Record], decision: Decision | None) -> Record | None:
    """The recommendation: racing's pick when it is tied with the best (it knows every setting's
    cost), else the cheapest record tied with the best."""
    pick = decision.pick if decision is not None else None
    picked = next((r for r in records if r.trial == pick and r.tied_with_best), None)
    return picked or recommended(records)


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
    return OnRanks(spec.ranks, one_rank(spec), str(rank_file(out_path)), options.out is not None, spec.torchrun)


def summarize(options: SweepOptions, spec: RunSpec, chosen_from: Chosen, about: Labels, found: Findings) -> Summary:
    """The summary the CLI prints and the API returns: the recommendation, what to change, how
    sure, and with ranks the one-rank sweep of the same config beside it."""
    records, trials = chosen_from.records, chosen_from.trials
    chosen = chosen_record(records, chosen_from.decision)
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
        records = [r for r in read_records(path) if r.config_sha == spec.sha and r.scale == spec.scale
                   and (r.ranks or 1) == 1]
    except ResultsError:  # unreadable: as if it were not there
        records = []
    chosen = recommended(records)
    if chosen is None or chosen.throughput is None:
        return OneRank(str(path))
    return OneRank(str(path), chosen.trial, chosen.throughput)
