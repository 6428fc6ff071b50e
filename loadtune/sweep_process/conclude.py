"""After the last repeat: the trials ranked, each advice checked against what was measured, the
findings, how sure the pick is, and the summary: one SweepResult, from which the CSV, the
table, `--json` and the chart are rendered."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from loadtune.config import RunSpec
from loadtune.errors import ResultsError
from loadtune.kinds import RankBy
from loadtune.options import SweepOptions, default_output
from loadtune.results.advice import with_checked_advice
from loadtune.results.choice import recommended
from loadtune.results.findings import BusyMachine, Disagreement, Finding, WorkersBeyondCores
from loadtune.results.record import Record, rank_file, read_records
from loadtune.results.report import OneRank, Summary, noise_warnings, summarize_sweep
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
    summary = summarize(options, runner.spec, runner.files.out_path, records, runner.trials, runner.decision(), scores,
                        device=setup.device, warnings=warnings, notes=notes, source=runner.spec.source,
                        data=runner.data.findings(), model=runner.model.report())
    return SweepResult(runner.files.out_path, records, summary, runner.trials)


def ranked(runner: Racer, rank_by: RankBy) -> list[Record]:
    scored = [runner.scored(r.trial) for r in runner.records if r.trial != IDEAL]
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


def summarize(options: SweepOptions, spec: RunSpec, out_path: Path, records: Sequence[Record],
              trials: Mapping[str, Trial], decision: Decision | None, scores: Mapping[str, Scored],
              **meta: Any) -> Summary:
    """The summary the CLI prints and the API returns: the recommendation, what to change, how
    sure, and with ranks the one-rank sweep of the same config beside it."""
    chosen = chosen_record(records, decision)
    kwarg = spec.config.dataset.scale_kwarg
    meta.update(output=str(out_path), config=spec.name, scale=spec.scale,
                scaled=f"dataset.kwargs.{kwarg} = {spec.config.dataset.kwargs[kwarg]}" if kwarg else None,
                ranks=spec.ranks, rank_by=str(options.rank_by), strategy=str(options.strategy), decision=decision,
                factory=spec.config.dataset.factory)
    if spec.ranks > 1:
        meta.update(one_rank=one_rank(spec), per_rank_csv=str(rank_file(out_path)),
                    out_given=options.out is not None, torchrun=spec.torchrun)
    if chosen is not None:
        meta.update(zip(("speedup_lo", "speedup_hi"), speedup_interval(scores, chosen.trial)))
        # Fitted again as `loadtune predict` fits it (whole epochs, as training runs them), so the
        # line agrees with the command it points to.
        moved, same = travel(records, settings_of(chosen), spec.config.measure.tolerance)
        meta.update(travel=tuple(moved), travel_same=tuple(same))
    chosen_trial = trials.get(chosen.trial or "") if chosen is not None else None
    baseline = trials.get(BASELINE)
    return summarize_sweep(records, chosen, chosen_trial.loader_kwargs if chosen_trial else None,
                           baseline.loader_kwargs if baseline is not None and baseline.settings else None, **meta)


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
