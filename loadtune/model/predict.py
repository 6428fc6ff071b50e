"""What another machine should use (`loadtune predict`, docs/moving.md): the pipeline model
fitted to a sweep's measured rows, or to a real training run's watched rows, asked about a
target with other usable cores, other ranks sharing them, another step time and, for memory,
another data scale.

Every config of the space (each combination of the values a sweep's rows hold; around a watched
loader, the default sweep, watched.default_sweep) is predicted for the target; the
recommendation is the cheapest predicted within the tolerance of the predicted best among those
that fit the target's memory. Offline: numpy and the records only.

The values are predict_values', a config's memory predict_memory's, the output
present.predict_text's; compare.checks sets a model or a sweep against another file.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from loadtune.asked.trials import BASELINE, COMBINED, IDEAL, cost_of, effective_settings, format_value
from loadtune.core.errors import ResultsError
from loadtune.core.kinds import TOLERANCE
from loadtune.decide.choice import choose as choose_one, recommended as measured_pick, within_tolerance
from loadtune.model.evidence import evidence_of
from loadtune.model.fitted import COLLECTIVE_MS, PipelineModel, Prediction
from loadtune.model.model import MIN_TRIALS_TO_FIT, check_columns, fit, prediction_error, unshown_figures
from loadtune.model.predict_memory import memory_model, memory_there
from loadtune.model.predict_values import (
    Carried,
    Choice,
    Fit,
    Forecast,
    ResolvedTarget,
    Source,
    Target,
    TargetRow,
    Travel,
)
from loadtune.record.record import Record, load_records
from loadtune.record.settings import SETTING_COLUMNS, config_name
from loadtune.record.watched import (
    LoaderInfo,
    combine_ranks,
    default_sweep,
    for_prediction,
    info_for,
    kept_settings,
    loader_file,
    read_loader_info,
)

NEEDS_WORKERS = ("prefetch_factor", "persistent_workers", "worker_threads")
# The settings that make a config, in the order a config is written.
CONFIG_KEYS = SETTING_COLUMNS
# A target this far beyond what was measured (cores, step) is an extrapolation, said so.
EXTRAPOLATION_MARGIN = 0.10
# Targets the sweep's summary checks the pick against: (label, cores factor, ranks factor,
# step factor); {ranks} in a label is the target's ranks.
COMMON_TARGETS: tuple[tuple[str, float, int, float], ...] = (
    ("half the cores", 0.5, 1, 1.0),
    ("{ranks} ranks sharing these cores", 1.0, 2, 1.0),
    ("a step twice as fast", 1.0, 1, 0.5),
)


# --- the space and the source ----------------------------------------------------------------


def applied(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as DataLoader applies them; without workers nothing persists."""
    s = effective_settings(settings)
    if not s["num_workers"]:
        s["persistent_workers"] = False
    return s


def settings_of(record: Record) -> dict[str, Any]:
    """A row's DataLoader settings as DataLoader applies them."""
    return applied({k: record.column(k) for k in CONFIG_KEYS})


def config_text(settings: Mapping[str, Any], keys: Sequence[str] = CONFIG_KEYS) -> str:
    """A config by the keywords of `keys` that set it (those that vary in a space; num_workers
    always), named as every command names one (settings.config_name)."""
    return config_name(applied(settings), shown=keys)


# A config's identity: its settings as text, in CONFIG_KEYS order.
SettingsKey = tuple[str, ...]


def varying(configs: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The keys whose value differs between the configs."""
    return tuple(k for k in CONFIG_KEYS if len({format_value(c.get(k)) for c in configs}) > 1)


def settings_key(settings: Mapping[str, Any]) -> SettingsKey:
    """A config's identity: its settings as text, in CONFIG_KEYS order."""
    return tuple(format_value(settings.get(k)) for k in CONFIG_KEYS)


@dataclass(frozen=True)
class Names:
    """How a file names configs, as its sweep named them: a config the sweep has a row of (measured
    or predicted) by that row's trial; any other by what differs from the sweep's baseline
    (settings.config_name), its multi-key trials' order of keys first. Without a sweep's baseline
    (a run's rows), by the keys that vary among the configs named (`shown`)."""

    baseline: dict[str, Any] | None = None
    trials: dict[SettingsKey, str] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    def __call__(self, settings: Mapping[str, Any], shown: Sequence[str] = CONFIG_KEYS) -> str:
        known = self.trials.get(settings_key(applied(settings)))
        if known is not None:
            return known
        if self.baseline is None:
            return config_text(settings, shown)
        return config_name(applied(settings), self.baseline, order=self.order)


def names_of(records: Sequence[Record]) -> Names:
    """How the records' sweep named its configs (Names); a run's rows: by their settings."""
    rows = [r for r in records
            if not r.watched and r.trial not in (None, IDEAL, COMBINED) and r.settings.num_workers is not None]
    base = next((r for r in rows if r.trial == BASELINE), None)
    if base is None:
        return Names()
    trials: dict[SettingsKey, str] = {}
    for r in sorted(rows, key=lambda r: r.trial != BASELINE):  # the baseline's name first
        trials.setdefault(settings_key(settings_of(r)), str(r.trial))
    changed = [r.settings.changed for r in rows]
    order = dict.fromkeys(k for c in changed if c and "+" in c for k in c.split("+"))
    return Names(settings_of(base), trials, tuple(order))


def space(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Every config of the space: each combination of the values a sweep's rows hold, and around
    each watched loader the values of the default sweep (watched.default_sweep: a run measured
    one config) with its other settings as they were (a setting that needs workers is left out
    where there are none), cheapest first."""
    rows = [settings_of(r) for r in records
            if r.trial != IDEAL and not r.data_flagged and ((r.ran and not r.watched) or r.predicted_only)]
    # A setting that needs workers takes its values from the rows that had workers.
    found: dict[str, dict[str, Any]] = {k: {format_value(s[k]): s[k] for s in rows
                                            if s["num_workers"] or k not in NEEDS_WORKERS} for k in CONFIG_KEYS}
    for r in records:
        if r.watched and r.ran and not r.data_flagged:
            own, tried = settings_of(r), default_sweep(r)
            for k in CONFIG_KEYS:
                for v in tried.get(k, [own[k]] if own["num_workers"] or k not in NEEDS_WORKERS else []):
                    found[k].setdefault(format_value(v), v)
    values = {k: list(found[k].values()) or [None] for k in CONFIG_KEYS}
    seen: dict[SettingsKey, dict[str, Any]] = {}
    for combo in itertools.product(*values.values()):
        settings = applied(dict(zip(CONFIG_KEYS, combo)))
        seen.setdefault(settings_key(settings), settings)
    return sorted(seen.values(), key=cost_of)


def measured_rows(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if evidence_of(r) is not None]


def _mode(values: Iterable[int]) -> int:
    values = list(values)
    return max(set(values), key=values.count)


def _batch_size(rows: Sequence[Record]) -> int:
    """The most common batch size of measured rows (each has one)."""
    return _mode(int(r.settings.batch_size) for r in rows if r.settings.batch_size)


def source_of(records: Sequence[Record], model: PipelineModel) -> Source:
    """The measured machine; its pick: the sweep's recommendation, else the watched loader's own
    settings (what the run ran)."""
    rows = measured_rows(records)
    batch = _batch_size(rows)
    steps = [float(r.figures.step_ms) for r in rows if r.figures.step_ms is not None and r.settings.batch_size == batch]
    step = model.costs.step_ms_per_sample * batch
    pick = measured_pick(records)
    run = next((r for r in rows if r.watched), None) if pick is None else None
    chosen = pick if pick is not None else run
    return Source(cores=model.cores * model.ranks, ranks=model.ranks, batch_size=batch, step_ms=step,
                  step_ms_range=(min(steps), max(steps)) if steps else (step, step),
                  scale=float(rows[0].run.scale or 1.0), ram_gb=rows[0].run.machine.ram_gb,
                  shm_gb=rows[0].run.machine.shm_free_gb,
                  pick=settings_of(chosen) if chosen is not None else None, run=run.trial if run is not None else None)


def fit_records(records: Sequence[Record], where: str = "the file", min_trials: int = 1) -> PipelineModel:
    """The pipeline model fitted to every measured row (a watched loader's ranks combined first),
    or a ResultsError saying why not. One measured config is enough: the figures it cannot show
    stay neutral (model.unshown_figures says which); the sweep's own checks ask for `min_trials`
    MIN_TRIALS_TO_FIT."""
    combined = combine_ranks(records)
    rows = measured_rows(combined)
    if not rows:
        raise ResultsError(f"{where}: no measured row with the model's evidence (every trial failed, was "
                           f"flagged by the data check or lacks fetch_ms): nothing to predict from")
    # Epochs run to the dataset's end, as in training (measure.epoch_batches is not in the file).
    model = fit(rows, min_trials=min_trials)
    if model is None:
        raise ResultsError(f"{where}: the pipeline model needs at least {min_trials} measured trials, the file has "
                           f"{len(rows)}")
    return read_persistence(model, rows, space(combined))[0]


# A start figure read from the configs measured with and without persistent workers (read_persistence)
# is searched between 0 and this, halving the interval this many times.
START_SEARCH_MAX_MS = 10_000.0
START_SEARCH_HALVINGS = 30


def read_persistence(model: PipelineModel, records: Sequence[Record],
                     configs: Sequence[Mapping[str, Any]]) -> tuple[PipelineModel, str | None]:
    """The model with persistence's effect read from the rows that measured it: where no measured
    row shows the start figures persistent workers decide (JUDGED_BY; model.unshown_figures) but
    rows measured configs with workers both with and without them, the first such figure is set so
    that the model is as far off on the one side as on the other (the median log of measured /
    predicted, each side's). The model as it is where it cannot be read. Also the figure set."""
    neutral = {name for name, _ in unshown_figures(model, records, configs)}
    figure = next((f for f in JUDGED_BY["persistent_workers"] if f in neutral), None)
    sides: dict[bool, list[tuple[dict[str, Any], float]]] = {True: [], False: []}
    for r in measured_rows(records):
        settings = settings_of(r)
        if settings["num_workers"] and r.throughput:
            sides[bool(settings["persistent_workers"])].append((settings, float(r.throughput)))
    if figure is None or not all(sides.values()):
        return model, None

    def with_figure(value: float) -> PipelineModel:
        return replace(model, costs=replace(model.costs, **{figure: value}))

    def gap(value: float) -> float:
        """How much further off the model is with persistent workers than without (log)."""
        candidate = with_figure(value)
        off = [statistics.median(math.log(t / candidate.predict(s).throughput) for s, t in sides[persistent])
               for persistent in (True, False)]
        return off[0] - off[1]

    lo, hi = 0.0, START_SEARCH_MAX_MS
    at_lo, at_hi = gap(lo), gap(hi)
    if at_lo * at_hi > 0:  # no root between: the end the rows are nearer
        return with_figure(lo if abs(at_lo) <= abs(at_hi) else hi), figure
    for _ in range(START_SEARCH_HALVINGS):
        middle = (lo + hi) / 2
        if gap(middle) * at_lo > 0:
            lo = middle
        else:
            hi = middle
    return with_figure((lo + hi) / 2), figure


# --- predicting ---------------------------------------------------------------------------------


def resolve(target: Target, source: Source) -> ResolvedTarget:
    """The target with the source's figures where it gives none."""
    return ResolvedTarget(cores=float(target.cores if target.cores is not None else source.cores),
                          ranks=max(int(target.ranks or 1), 1),
                          step_ms=float(target.step_ms if target.step_ms is not None else source.step_ms),
                          scale=float(target.scale if target.scale is not None else source.scale),
                          ram_gb=target.ram_gb if target.ram_gb is not None else source.ram_gb,
                          shm_gb=target.shm_gb if target.shm_gb is not None else source.shm_gb)


def out_of_range(target: Target, tolerance: float | None) -> tuple[str, str] | None:
    """The first of `loadtune predict`'s options given outside its range, as (its flag, what it
    must be, and what it got); None when each is in range or not given."""
    checks: tuple[tuple[float | None, str, Callable[[float], bool], str], ...] = (
        (target.cores, "--cores", lambda v: v > 0, "above 0"),
        (target.step_ms, "--step-ms", lambda v: v > 0, "above 0"),
        (target.scale, "--scale", lambda v: v > 0, "above 0"),
        (target.ram_gb, "--ram-gb", lambda v: v > 0, "above 0"),
        (target.shm_gb, "--shm-gb", lambda v: v >= 0, "0 or more"),
        (tolerance, "--tolerance", lambda v: 0 <= v < 1, "at least 0 and below 1"))
    for value, flag, ok, what in checks:
        if value is not None and not (math.isfinite(value) and ok(value)):
            return flag, f"must be {what}, got {value:g}"
    return None


def extrapolations(source: Source, target: ResolvedTarget, step_given: bool = True,
                   collective_ms: float = COLLECTIVE_MS) -> list[str]:
    """What the target asks beyond what the source measured, and how far (`collective_ms`: what
    the model adds for the ranks' collective)."""
    out = []
    if target.ranks > source.ranks and not step_given:
        out.append(f"{target.ranks} ranks meet at every step (DDP's all_reduce), which the {source.ranks}-rank "
                   f"{'run' if source.run else 'sweep'} "
                   f"never timed: the step is taken as measured plus {collective_ms:g} ms for the collective "
                   f"(gloo between processes of one host); give --step-ms from a step timed on the target")
    per_rank, measured = target.cores / target.ranks, source.cores / source.ranks
    if per_rank > measured * (1 + EXTRAPOLATION_MARGIN):
        out.append(f"{per_rank:g} cores per rank is {per_rank / measured:.1f}x the {measured:g} measured: the model "
                   f"assumes each added core works like the measured ones")
    lo, hi = source.step_ms_range
    if target.step_ms < lo * (1 - EXTRAPOLATION_MARGIN):
        out.append(f"a {target.step_ms:g} ms step is {target.step_ms / lo:.2f}x the shortest measured ({lo:.1f} ms)")
    elif target.step_ms > hi * (1 + EXTRAPOLATION_MARGIN):
        out.append(f"a {target.step_ms:g} ms step is {target.step_ms / hi:.2f}x the longest measured ({hi:.1f} ms)")
    return out


def predict_space(model: PipelineModel, configs: Sequence[Mapping[str, Any]], cores: float, ranks: int,
                  step_scale: float, collective_ms: float | None = None) -> list[tuple[dict[str, Any], Prediction]]:
    return [(dict(s), model.predict(s, cores=cores, ranks=ranks, step_scale=step_scale, collective_ms=collective_ms))
            for s in configs]


def choose(predicted: Sequence[tuple[Mapping[str, Any], float]], tolerance: float,
           keep: Mapping[str, Any] | None = None) -> int | None:
    """Index of the config to recommend among (settings, predicted samples/s): of those whose
    figure is finite, the ones within `tolerance` of the best (choice.within_tolerance), and
    of these the one that changes fewest of the settings in `keep` (settings whose effect nothing
    measured shows: a figure kept neutral is no reason to change them; one that needs workers
    counts only where the config has workers), then the cheapest (trials.cost_of), then the
    first in `predicted`'s order (choice.choose). None when no figure is finite."""
    scored = [(i, t) for i, (_, t) in enumerate(predicted) if math.isfinite(t)]
    if not scored:
        return None
    best = max(t for _, t in scored)

    def changed(settings: Mapping[str, Any]) -> int:
        s = applied(settings)
        return sum(format_value(s.get(k)) != format_value(v) for k, v in (keep or {}).items()
                   if s["num_workers"] or k not in NEEDS_WORKERS)

    pick = choose_one(scored, lambda it: within_tolerance(it[1], best, tolerance),
                      lambda it: (changed(predicted[it[0]][0]), *cost_of(predicted[it[0]][0])))
    return None if pick is None else pick[0]


# The settings whose effect a figure decides: kept as the run had them while that figure is neutral.
JUDGED_BY = {"persistent_workers": ("worker_start_ms", "persistent_resume_ms"), "pin_memory": ("h2d_pinned_ms",)}


def unjudged(source: Source, neutral: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Of a run's own settings, those whose effect only figures kept neutral would show."""
    if source.run is None or source.pick is None:
        return {}
    names = {name for name, _ in neutral}
    return {key: source.pick.get(key) for key, figures in JUDGED_BY.items() if names & set(figures)}


def forecast(records: Sequence[Record], target: Target = Target(), tolerance: float = TOLERANCE,
             where: str = "the file", model: PipelineModel | None = None,
             loader: LoaderInfo | None = None) -> Forecast:
    """Every config of the records' space predicted for `target`, and what it should use (by
    `model`, default: the model fitted to the records). A watched loader's ranks are combined
    first (as a sweep records a trial on ranks); of several watched loaders, the one the run spent
    most time in is predicted. `loader`: what NAME.loader.json says of the watched loader (its
    other settings go into the paste line)."""
    records, note = for_prediction(records)
    model = model or fit_records(records, where)
    source = source_of(records, model)
    step_given = target.step_ms is not None
    resolved = resolve(target, source)
    _check_asked(source, resolved, step_given, tolerance, where)
    configs = space(records)
    model, read = read_persistence(model, records, configs)
    rows = _predicted_rows(records, model, source, resolved, configs, step_given)
    neutral = tuple((name, run) for name, run in unshown_figures(model, records, configs)
                    if read is None or name not in JUDGED_BY["persistent_workers"])
    ranked, choice = _recommend(rows, tolerance, source, neutral, [note] if note else [])
    beyond = extrapolations(source, resolved, step_given, model.collective_ms)
    kept, aside = kept_settings(loader)
    fitted = Fit(model, prediction_error(records), neutral, tuple(beyond), read)
    return Forecast(source, resolved, ranked, choice, fitted, Carried(kept, tuple(aside)))


def _check_asked(source: Source, target: ResolvedTarget, step_given: bool, tolerance: float, where: str) -> None:
    """A ResultsError for a target or tolerance that cannot be predicted for."""
    for name, value in (("cores", target.cores), ("step_ms", target.step_ms if step_given else 1.0),
                        ("scale", target.scale)):
        if not (math.isfinite(value) and value > 0):
            raise ResultsError(f"the target's {name} must be above 0, got {value:g}")
    if not 0 <= tolerance < 1:
        raise ResultsError(f"the tolerance must be at least 0 and below 1, got {tolerance:g}")
    if source.step_ms <= 0 and target.step_ms != source.step_ms:
        raise ResultsError(f"{where}: the measured step took no time, so another step time cannot be scaled from it")


def _predicted_rows(records: Sequence[Record], model: PipelineModel, source: Source, target: ResolvedTarget,
                    configs: Sequence[dict[str, Any]], step_given: bool) -> list[TargetRow]:
    """Each config predicted for the target, with its memory there and, on the source's own
    machine, what the source measured of it (what the choice then goes by: TargetRow.figure)."""
    step_scale = target.step_ms / source.step_ms if source.step_ms > 0 else 1.0
    memory = memory_model(measured_rows(records))
    measured: dict[SettingsKey, float] = {}
    if _same_machine(source, target):
        for r in measured_rows(records):
            if r.throughput is not None:  # each measured row has one
                measured.setdefault(settings_key(settings_of(r)), float(r.throughput))
    keys = varying(configs)
    names = names_of(records)
    # A step timed on the target holds its ranks' collective; else the model adds what more ranks cost.
    collective = 0.0 if step_given else None
    return [TargetRow(names(settings, keys), settings, p.throughput, p.throughput / target.ranks, p.wait_ratio,
                      p.cpu_bound, measured.get(settings_key(settings)),
                      memory_there(memory.need(settings, target.ranks, target.scale), target))
            for settings, p in predict_space(model, configs, target.cores, target.ranks, step_scale, collective)]


def _recommend(rows: list[TargetRow], tolerance: float, source: Source, neutral: Sequence[tuple[str, str]],
               notes: list[str]) -> tuple[tuple[TargetRow, ...], Choice]:
    """The rows best first (by TargetRow.figure: on the source's own machine, what it measured of
    a config it measured), the one `choose` picks among those that fit marked recommended, and the
    source's own pick among them."""
    fitting = [i for i, r in enumerate(rows) if r.memory.fits]
    chosen = choose([(rows[i].settings, rows[i].figure) for i in fitting], tolerance, unjudged(source, neutral))
    if not fitting:
        notes.append("no config fits the target's memory: see each row's memory")
    if chosen is not None:
        rows[fitting[chosen]] = replace(rows[fitting[chosen]], recommended=True)
    rows.sort(key=lambda r: -r.figure)
    pick = next((r for r in rows if r.recommended), None)
    picked = settings_key(source.pick) if source.pick is not None else None
    source_pick = next((r for r in rows if settings_key(r.settings) == picked), None)
    return tuple(rows), Choice(pick, tolerance, source_pick, tuple(notes))


def _same_machine(source: Source, target: ResolvedTarget) -> bool:
    return math.isclose(source.cores, target.cores) and source.ranks == target.ranks and \
        math.isclose(source.step_ms, target.step_ms, rel_tol=1e-6)


def forecast_file(path: Path | str, target: Target = Target(), tolerance: float = TOLERANCE) -> Forecast:
    """`loadtune predict`: the forecast from a results CSV (a sweep's, or a run's watched rows,
    with NAME.loader.json beside it where there is one)."""
    records = load_records(path)
    check_columns(path)
    infos = read_loader_info(path)
    kept, _ = for_prediction(records)
    run = next((r.trial for r in kept if r.watched and r.ran), None)
    pick = measured_pick(records)
    if run is not None:
        info = info_for(infos, run)
    else:  # a sweep's trials: the loader's other settings of its pick, as its own paste line has them
        info = infos.get(str(pick.trial) if pick is not None else BASELINE) or infos.get(BASELINE)
    result = forecast(records, target, tolerance, where=str(path), loader=info)
    if info is not None:
        return result
    return replace(result, carried=replace(result.carried, unknown_rest=loader_file(path).name))


# --- the sweep's summary: does the pick travel? --------------------------------------------------


def travel(records: Sequence[Record], pick: Mapping[str, Any] | None, tolerance: float = TOLERANCE,
           model: PipelineModel | None = None) -> tuple[list[Travel], list[str]]:
    """For each of COMMON_TARGETS: `loadtune predict`'s pick there where it differs from `pick`
    (with what `pick` would run there); and the labels of the targets where it does not."""
    if pick is None:
        return [], []
    try:
        model = model or fit_records(records, min_trials=MIN_TRIALS_TO_FIT)
    except ResultsError:
        return [], []
    key = settings_key(applied(pick))
    cores, ranks = model.cores * model.ranks, model.ranks
    step_ms = model.costs.step_ms_per_sample * _batch_size(measured_rows(records))
    moved, same = [], []
    for label, core_factor, rank_factor, step_factor in COMMON_TARGETS:
        if cores * core_factor < 1:
            continue
        label = label.format(ranks=ranks * rank_factor)
        # (a step that took no time is as fast as it gets: the step as measured)
        there = forecast(records, Target(cores=cores * core_factor, ranks=ranks * rank_factor,
                                         step_ms=step_ms * step_factor if step_factor != 1 and step_ms > 0 else None),
                         tolerance, model=model)
        theirs = there.recommended
        ours = next((r for r in there.rows if settings_key(r.settings) == key), None)
        if theirs is None or ours is None:
            continue
        if _travels(ours, theirs, tolerance):
            same.append(label)
            continue
        moved.append(Travel(label, theirs.config, ours.predicted_throughput / theirs.predicted_throughput))
    return moved, same


def _travels(pick: TargetRow, recommended: TargetRow, tolerance: float) -> bool:
    """Whether the sweep's pick still holds on a target where `recommended` is predict's pick: it
    is that config, or it is predicted within `tolerance` of it (pick >= (1 - tolerance) *
    recommended), a tie that keeps the sweep's pick over a cheaper recommendation."""
    return settings_key(pick.settings) == settings_key(recommended.settings) or \
        within_tolerance(pick.predicted_throughput, recommended.predicted_throughput, tolerance)
