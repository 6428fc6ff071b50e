"""A model or a sweep set against another file (`loadtune compare`): what the model fitted to
one file predicts for another file's machine, and what a sweep said of a real run's loaders.
Offline: numpy and the records only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Sequence

from loadtune.asked.trials import IDEAL
from loadtune.core.errors import ResultsError
from loadtune.core.kinds import TOLERANCE
from loadtune.model.evidence import evidence_of
from loadtune.model.model import MIN_TRIALS_TO_FIT
from loadtune.model.predict import (
    choose,
    fit_records,
    forecast,
    measured_rows,
    names_of,
    predict_space,
    resolve,
    settings_key,
    settings_of,
    source_of,
    space,
    varying,
)
from loadtune.model.predict_values import MEASURED, PREDICTED, ResolvedTarget, RunCheck, Source, Target, TransferCheck
from loadtune.record.record import Record
from loadtune.record.watched import combine_ranks, loaders

# B's step differs from A's by more than this share: B's step is part of its machine.
STEP_DIFFERS = 0.10


def machine_of(records: Sequence[Record]) -> Machine:
    """(usable cores of the machine, ranks, median step per sample)."""
    rows = measured_rows(records)
    first = evidence_of(rows[0])
    assert first is not None  # a measured row has evidence
    steps = [float(r.figures.step_ms) / r.settings.batch_size for r in rows
             if r.figures.step_ms is not None and r.settings.batch_size]
    return first.cores * first.ranks, first.ranks, statistics.median(steps) if steps else None


Machine = tuple[float, int, float | None]


def _step_moved(a: Machine, b: Machine) -> bool:
    """B's step differs from A's by more than STEP_DIFFERS. On other ranks a step as timed also
    holds the collective and the wait for the slowest rank: the model adds those itself, so the
    step counts as moved only between machines of equal ranks."""
    (_, ranks_a, step_a), (_, ranks_b, step_b) = a, b
    return bool(step_a and step_b and abs(step_b / step_a - 1) > STEP_DIFFERS) and ranks_a == ranks_b


def _alike(a: Machine, b: Machine) -> bool:
    """The same usable cores, ranks and step: nothing to predict between them."""
    return math.isclose(a[0], b[0]) and a[1] == b[1] and not _step_moved(a, b)


def _target(source: Source, a: Machine, b: Machine) -> ResolvedTarget:
    """B's machine as a target of the model fitted to A: its cores, ranks and, where it moved,
    its step (scaled from the model's)."""
    step_a, step_b = a[2], b[2]
    step_ms = source.step_ms * step_b / step_a if _step_moved(a, b) and step_a and step_b else None
    return resolve(Target(cores=b[0], ranks=b[1], step_ms=step_ms), source)


def transfer_check(a: Sequence[Record], b: Sequence[Record], tolerance: float = TOLERANCE) -> TransferCheck | None:
    """A's model asked about B's machine (its cores, ranks and, where it differs, its step), set
    against B's measurements; None when the machines are alike or either file cannot say. A watched
    loader's ranks are combined first."""
    a, b = combine_ranks(a), combine_ranks(b)
    if not any(r.assessment.fetch_ms is not None for r in measured_rows(a)) or not measured_rows(b):
        return None  # no evidence to fit (a file from before the model), or nothing measured there
    if _alike(machine_of(a), machine_of(b)):
        return None
    try:
        model = fit_records(a, min_trials=MIN_TRIALS_TO_FIT)
    except ResultsError:
        return None
    source = source_of(a, model)
    target = _target(source, machine_of(a), machine_of(b))
    step_scale = target.step_ms / source.step_ms if source.step_ms > 0 else 1.0
    # B's measured rows, each with its throughput
    there = [(r, r.throughput) for r in measured_rows(b) if r.throughput is not None]
    configs = space(a)
    known = {settings_key(s) for s in configs}
    for r, _ in there:
        if settings_key(settings_of(r)) not in known:
            configs.append(settings_of(r))
            known.add(settings_key(settings_of(r)))
    scored = predict_space(model, configs, target.cores, target.ranks, step_scale)
    chosen = choose([(s, p.throughput) for s, p in scored], tolerance)
    if chosen is None:
        return None
    keys = varying(configs)
    name = names_of(b)  # as B's sweep names its trials; a run's rows: as A names them
    name = name if name.baseline is not None else names_of(a)
    pick = scored[chosen][0]
    best, best_throughput = max(there, key=lambda measured: measured[1])
    predicted = {settings_key(s): p.throughput for s, p in scored}
    for_trial = {str(r.trial): predicted[settings_key(settings_of(r))] for r, _ in there}
    errors = [abs(for_trial[str(r.trial)] / throughput - 1) for r, throughput in there]
    got = [throughput for r, throughput in there if settings_key(settings_of(r)) == settings_key(pick)]
    return TransferCheck(target, name(pick, keys), max(got) / best_throughput if got else None,
                         name(settings_of(best), keys), statistics.median(errors), len(errors), for_trial)


def run_checks(sweep: Sequence[Record], run: Sequence[Record], tolerance: float = TOLERANCE,
               modelled: bool = True) -> list[RunCheck]:
    """For each watched loader of `run` (its ranks combined), what `sweep` said of its config:
    the sweep's measurement where it measured that config on a machine like the run's (cores,
    ranks, step), else its model's prediction for the run's machine (`modelled`: the sweep has
    the model's columns); and what the model recommends there."""
    sweep = combine_ranks(sweep)
    ran = [r for r in sweep if r.ran and not r.watched and r.trial != IDEAL and not r.data_flagged]
    model = None
    if modelled and measured_rows(sweep):
        try:
            model = fit_records(sweep)
        except ResultsError:
            model = None
    by_config = {settings_key(settings_of(r)): r for r in ran}
    there = machine_of(sweep) if measured_rows(sweep) else None
    name = names_of(sweep)
    checks = []
    for loader in loaders(run):
        assert loader.throughput is not None and loader.wait_ratio is not None  # a watched loader that ran
        settings = settings_of(loader)
        keys = varying([settings, *(settings_of(r) for r in ran)])
        here = machine_of([loader]) if evidence_of(loader) is not None else None
        measured = by_config.get(settings_key(settings))
        base = RunCheck(str(loader.trial), name(settings, keys), int(loader.measuring.ranks or 1),
                        float(loader.throughput), float(loader.wait_ratio), None, None, None)
        if measured is not None and there is not None and here is not None and _alike(there, here):
            checks.append(replace(base, sweep_throughput=measured.throughput, sweep_wait_ratio=measured.wait_ratio,
                                  figure=MEASURED, sweep_trial=measured.trial))
            continue
        if model is None or there is None or here is None:
            checks.append(base)
            continue
        source = source_of(sweep, model)
        target = _target(source, there, here)
        step_scale = target.step_ms / source.step_ms if source.step_ms > 0 else 1.0
        guess = model.predict(settings, cores=target.cores, ranks=target.ranks, step_scale=step_scale)
        step_given = target.step_ms != source.step_ms
        advice = forecast(sweep, Target(cores=target.cores, ranks=target.ranks,
                                        step_ms=target.step_ms if step_given else None), tolerance, model=model)
        pick = advice.recommended
        checks.append(replace(base, sweep_throughput=guess.throughput, sweep_wait_ratio=guess.wait_ratio,
                              figure=PREDICTED, target=target, pick=pick.config if pick else None,
                              pick_throughput=pick.predicted_throughput if pick else None))
    return checks

