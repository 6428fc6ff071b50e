"""What another machine should use (`loadtune predict`, docs/moving.md): the pipeline model
fitted to a sweep's measured rows, or to a real training run's watched rows, asked about a
target with other usable cores, other ranks sharing them, another step time and, for memory,
another data scale.

Every config of the space (each combination of the values a sweep's rows hold; around a watched
loader, the default sweep, watched.default_sweep) is predicted for the target; the
recommendation is the cheapest predicted within the tolerance of the predicted best among those
that fit the target's memory. Offline: numpy and the records only.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rich.table import Table
from rich.text import Text

from loadtune.errors import ResultsError
from loadtune.kinds import TOLERANCE
from loadtune.results.choice import SETTING_COLUMNS, config_name, dataloader_line, paste_settings
from loadtune.results.choice import recommended as measured_pick
from loadtune.results.findings import CheaperWaitsMore, ModelError
from loadtune.results.model import (
    COLLECTIVE_MS,
    MIN_TRIALS_TO_FIT,
    PipelineModel,
    Prediction,
    evidence_of,
    fit,
    prediction_error,
    unshown_figures,
)
from loadtune.results.record import Record, load_records, missing_columns
from loadtune.results.report import Travel, short_trial
from loadtune.results.table import Column, fitted_table
from loadtune.results.watched import (
    LoaderInfo,
    combine_ranks,
    default_sweep,
    for_prediction,
    info_for,
    kept_settings,
    loader_file,
    loaders,
    read_loader_info,
)
from loadtune.text import fmt
from loadtune.trials import BASELINE, COMBINED, IDEAL, cost_of, effective_settings, format_value

# What the model reads of each row: a file without these was written before the model existed.
MODEL_COLUMNS = ("fetch_ms", "fetch_cpu_share", "handover_ms", "step_ms", "main_cpu_util", "epoch_start_ms",
                 "cpu_count")
NEEDS_WORKERS = ("prefetch_factor", "persistent_workers", "worker_threads")
# The settings that make a config, in the order a config is written.
CONFIG_KEYS = SETTING_COLUMNS
# A target this far beyond what was measured (cores, step) is an extrapolation, said so.
EXTRAPOLATION_MARGIN = 0.10
# Memory: the share of the target's RAM a config may plan to use (the rest is the training
# process's model, the OS, page cache), and how many times over its batches in flight must
# fit /dev/shm (a batch that does not fit kills its worker with SIGBUS).
RAM_HEADROOM = 0.8
SHM_MARGIN = 1.5
MB_PER_GB = 1024.0
# Targets the sweep's summary checks the pick against: (label, cores factor, ranks factor,
# step factor); {ranks} in a label is the target's ranks.
COMMON_TARGETS: tuple[tuple[str, float, int, float], ...] = (
    ("half the cores", 0.5, 1, 1.0),
    ("{ranks} ranks sharing these cores", 1.0, 2, 1.0),
    ("a step twice as fast", 1.0, 1, 0.5),
)


@dataclass(frozen=True)
class Target:
    """The machine to predict for; None takes the source's figure (step: as measured)."""

    cores: float | None = None  # usable cores of the machine, shared by all ranks
    ranks: int = 1  # ranks on it, each with its own DataLoader
    step_ms: float | None = None  # the training step per batch (of the source's batch size)
    scale: float | None = None  # data scale, for memory (the source's, when None)
    ram_gb: float | None = None
    shm_gb: float | None = None


@dataclass(frozen=True)
class ResolvedTarget:
    """A Target with the source's figures where it gave none (resolve)."""

    cores: float
    ranks: int
    step_ms: float
    scale: float
    ram_gb: float | None = None
    shm_gb: float | None = None


@dataclass(frozen=True)
class Source:
    """What the rows were measured on."""

    cores: float  # usable cores of the machine (affinity and quota), all ranks together
    ranks: int
    batch_size: int  # the most common batch size: the one a step time refers to
    step_ms: float  # the model's uncontended step at that batch size
    step_ms_range: tuple[float, float]  # the step times measured, per batch of that size
    scale: float
    ram_gb: float | None
    shm_gb: float | None
    # the settings of the sweep's recommendation, when the file has one; of a run, the watched loader's own
    pick: dict[str, Any] | None
    run: str | None = None  # the watched loader, when the rows are a real training run's


@dataclass(frozen=True)
class Memory:
    """A config's memory on the target, after a full epoch at its data scale (per machine)."""

    ram_gb: float | None  # every rank's training process and workers
    shm_gb: float  # batches in flight in /dev/shm
    fits: bool
    why: str | None = None  # what does not fit


@dataclass(frozen=True)
class TargetRow:
    """One config of the space, predicted for the target."""

    config: str  # its settings, as DataLoader keywords
    settings: dict[str, Any]
    predicted_throughput: float  # samples/s, all ranks
    predicted_throughput_per_rank: float
    predicted_wait_ratio: float
    cpu_bound: bool
    measured_throughput: float | None  # on the source, where it was measured there
    memory: Memory
    recommended: bool = False


@dataclass(frozen=True)
class Forecast:
    """The space predicted for a target, best first, and the recommendation."""

    source: Source
    target: ResolvedTarget
    rows: tuple[TargetRow, ...]
    recommended: TargetRow | None
    extrapolated: tuple[str, ...]  # what lies beyond the measured range, and how far
    model: PipelineModel
    tolerance: float
    source_pick: TargetRow | None = None  # the source's own recommendation, predicted for the target
    notes: tuple[str, ...] = field(default=())
    # the model's error on the file: median |predicted/measured - 1| over the trials predicted
    # before they ran, and how many (model.prediction_error): the sweep's own `model.error`
    error: tuple[float | None, int] = (None, 0)
    # the model's figures no measured row shows, kept neutral, that a config predicted needs:
    # (figure, the run that would show it) (model.unshown_figures)
    neutral: tuple[tuple[str, str], ...] = ()
    # the watched loader's other DataLoader keywords, carried into the paste line, and what it had
    # that no keyword carries (its own sampler), to keep as it is
    kept: dict[str, Any] = field(default_factory=dict)
    aside: tuple[str, ...] = ()
    # where the loader's other settings would be (NAME.loader.json) when nothing beside the CSV
    # says them: the paste line then says to keep them as in the user's code
    unknown_rest: str | None = None

    @property
    def model_error(self) -> ModelError:
        """The model's error on the file, as the sweep's summary and `loadtune report` word it."""
        return ModelError(*self.error)

    @property
    def carried_share(self) -> float | None:
        """What the source's pick would run on the target, as a share of the recommendation."""
        if self.source_pick is None or self.recommended is None:
            return None
        return self.source_pick.predicted_throughput / self.recommended.predicted_throughput

    def to_json(self) -> dict[str, Any]:
        def row(r: TargetRow) -> dict[str, Any]:
            return {"config": r.config, "settings": r.settings,
                    "predicted_throughput": round(r.predicted_throughput, 2),
                    "predicted_throughput_per_rank": round(r.predicted_throughput_per_rank, 2),
                    "predicted_wait_ratio": round(r.predicted_wait_ratio, 4), "cpu_bound": r.cpu_bound,
                    "measured_throughput": r.measured_throughput,
                    "ram_need_gb": _round(r.memory.ram_gb, 3), "shm_need_gb": round(r.memory.shm_gb, 4),
                    "fits": r.memory.fits, "recommended": r.recommended}

        return {
            "source": {"cores": self.source.cores, "ranks": self.source.ranks, "batch_size": self.source.batch_size,
                       "step_ms": round(self.source.step_ms, 3),
                       "step_ms_range": [round(v, 3) for v in self.source.step_ms_range],
                       "scale": self.source.scale, "ram_gb": self.source.ram_gb, "shm_gb": self.source.shm_gb,
                       "pick": self.source_pick.config if self.source_pick else None, "run": self.source.run},
            "target": {"cores": self.target.cores, "ranks": self.target.ranks,
                       "step_ms": _round(self.target.step_ms, 3), "scale": self.target.scale,
                       "ram_gb": self.target.ram_gb, "shm_gb": self.target.shm_gb},
            "tolerance": self.tolerance,
            "recommended": row(self.recommended) if self.recommended else None,
            "source_pick": row(self.source_pick) if self.source_pick else None,
            "source_pick_share": _round(self.carried_share, 4),
            "extrapolated": list(self.extrapolated),
            "notes": list(self.notes),
            "neutral": [{"figure": name, "value": self.model.figure(name), "shown_by": run}
                        for name, run in self.neutral],
            "model": {**self.model.to_json(), **self.model_error.to_json()},
            "rows": [row(r) for r in self.rows],
        }

    def table_rows(self) -> list[dict[str, Any]]:
        """The rows as `--out` writes them: one flat dict per config."""
        return [{"config": r.config, **{k: r.settings.get(k) for k in CONFIG_KEYS},
                 "predicted_throughput": round(r.predicted_throughput, 2),
                 "predicted_throughput_per_rank": round(r.predicted_throughput_per_rank, 2),
                 "predicted_wait_ratio": round(r.predicted_wait_ratio, 4), "cpu_bound": r.cpu_bound,
                 "measured_throughput": r.measured_throughput, "ram_need_gb": _round(r.memory.ram_gb, 3),
                 "shm_need_gb": round(r.memory.shm_gb, 4), "fits": r.memory.fits, "recommended": r.recommended,
                 "target_cores": self.target.cores, "target_ranks": self.target.ranks,
                 "target_step_ms": _round(self.target.step_ms, 3), "target_scale": self.target.scale}
                for r in self.rows]


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# --- the space and the source ----------------------------------------------------------------


def applied(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as DataLoader applies them; without workers nothing persists."""
    s = effective_settings(settings)
    if not s["num_workers"]:
        s["persistent_workers"] = False
    return s


def settings_of(record: Record) -> dict[str, Any]:
    """A row's DataLoader settings as DataLoader applies them."""
    return applied({k: getattr(record, k) for k in CONFIG_KEYS})


def config_text(settings: Mapping[str, Any], keys: Sequence[str] = CONFIG_KEYS) -> str:
    """A config by the keywords of `keys` that set it (those that vary in a space; num_workers
    always), named as every command names one (choice.config_name)."""
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
    (choice.config_name), its multi-key trials' order of keys first. Without a sweep's baseline
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
            if not r.watched and r.trial not in (None, IDEAL, COMBINED) and r.num_workers is not None]
    base = next((r for r in rows if r.trial == BASELINE), None)
    if base is None:
        return Names()
    trials: dict[SettingsKey, str] = {}
    for r in sorted(rows, key=lambda r: r.trial != BASELINE):  # the baseline's name first
        trials.setdefault(settings_key(settings_of(r)), str(r.trial))
    order = dict.fromkeys(k for r in rows if r.changed and "+" in r.changed for k in r.changed.split("+"))
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
    return _mode(int(r.batch_size) for r in rows if r.batch_size)


def source_of(records: Sequence[Record], model: PipelineModel) -> Source:
    """The measured machine; its pick: the sweep's recommendation, else the watched loader's own
    settings (what the run ran)."""
    rows = measured_rows(records)
    batch = _batch_size(rows)
    steps = [float(r.step_ms) for r in rows if r.step_ms is not None and r.batch_size == batch]
    step = model.step_ms_per_sample * batch
    pick = measured_pick(records)
    run = next((r for r in rows if r.watched), None) if pick is None else None
    chosen = pick if pick is not None else run
    return Source(cores=model.cores * model.ranks, ranks=model.ranks, batch_size=batch, step_ms=step,
                  step_ms_range=(min(steps), max(steps)) if steps else (step, step),
                  scale=float(rows[0].scale or 1.0), ram_gb=rows[0].ram_gb, shm_gb=rows[0].shm_free_gb,
                  pick=settings_of(chosen) if chosen is not None else None, run=run.trial if run is not None else None)


def check_columns(path: Path | str) -> None:
    """A file written before the model's evidence columns cannot be predicted from: say which."""
    missing = missing_columns(path, MODEL_COLUMNS)
    if missing:
        raise ResultsError(f"{path}: cannot predict from this file: it lacks the columns {', '.join(missing)} "
                           "(written by an older loadtune); rerun the sweep with this version (--overwrite replaces "
                           "the file)")


def fit_records(records: Sequence[Record], where: str = "the file", min_trials: int = 1) -> PipelineModel:
    """The pipeline model fitted to every measured row (a watched loader's ranks combined first),
    or a ResultsError saying why not. One measured config is enough: the figures it cannot show
    stay neutral (model.unshown_figures says which); the sweep's own checks ask for `min_trials`
    MIN_TRIALS_TO_FIT."""
    rows = measured_rows(combine_ranks(records))
    if not rows:
        raise ResultsError(f"{where}: no measured row with the model's evidence (every trial failed, was "
                           f"flagged by the data check or lacks fetch_ms): nothing to predict from")
    # Epochs run to the dataset's end, as in training (measure.epoch_batches is not in the file).
    model = fit(rows, min_trials=min_trials)
    if model is None:
        raise ResultsError(f"{where}: the pipeline model needs at least {min_trials} measured trials, the file has "
                           f"{len(rows)}")
    return model


# --- memory -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryModel:
    """Memory per rank, from the measured rows: the training process, each worker, each
    worker's copy-on-read growth per batch the loader delivers, and a batch's bytes."""

    main_mb: float | None
    worker_mb: float | None
    growth_mb_per_batch: float  # per worker, per batch the rank's loader delivered
    batch_mb_per_sample: float
    dataset_len: int | None
    scale: float

    def need(self, settings: Mapping[str, Any], ranks: int, scale: float) -> tuple[float | None, float]:
        """(RAM GB, /dev/shm GB) of the whole machine for a config after one epoch at `scale`."""
        s = effective_settings(settings)
        workers, batch = int(s["num_workers"] or 0), int(s["batch_size"] or 1)
        prefetch = int(s["prefetch_factor"] or 0)
        shm = self.batch_mb_per_sample * batch * workers * (prefetch + 1) * ranks / MB_PER_GB
        if self.main_mb is None:
            return None, shm
        # Ranks split the data (DistributedSampler): each rank's workers read its share.
        epoch = (self.dataset_len or 0) * scale / self.scale / batch / ranks
        per_worker = (self.worker_mb or 0.0) + self.growth_mb_per_batch * epoch
        return ranks * (self.main_mb + workers * per_worker) / MB_PER_GB, shm


def memory_model(records: Sequence[Record]) -> MemoryModel:
    mains: list[float] = []
    worker_pss: list[float] = []
    growths: list[float] = []
    batch: list[float] = []
    for r in measured_rows(records):
        if r.peak_pss_mb is None:
            continue
        ranks = max(int(r.ranks or 1), 1)
        mains.append(r.peak_pss_mb / ranks - (r.num_workers or 0) * (r.worker_pss_mb or 0.0))
        if not r.num_workers or r.worker_pss_mb is None:
            continue
        worker_pss.append(r.worker_pss_mb)
        if r.pss_growth_mb is not None and r.batches:
            growths.append(max(0.0, r.pss_growth_mb) / (r.num_workers * ranks) / r.batches)
        # shm_need_mb counts every rank's workers.
        if r.shm_need_mb is not None and r.batch_size:
            batch.append(r.shm_need_mb / (r.num_workers * ranks * ((r.prefetch_factor or 2) + 1) * r.batch_size))
    worker_mb = statistics.median(worker_pss) if worker_pss else None
    main_mb = max(0.0, statistics.median(mains)) if mains else None
    first = next(iter(measured_rows(records)), None)
    return MemoryModel(main_mb, worker_mb, statistics.median(growths) if growths else 0.0,
                       statistics.median(batch) if batch else 0.0, first.dataset_len if first else None,
                       float(first.scale or 1.0) if first else 1.0)


def _memory(need: tuple[float | None, float], target: ResolvedTarget) -> Memory:
    ram, shm = need
    why = []
    if ram is not None and target.ram_gb is not None and ram > RAM_HEADROOM * target.ram_gb:
        why.append(f"needs {ram:.1f} GB of RAM, over {RAM_HEADROOM:.0%} of {target.ram_gb:g} GB")
    if target.shm_gb is not None and shm * SHM_MARGIN > target.shm_gb:
        why.append(f"needs {shm * MB_PER_GB:.0f} MB of /dev/shm ({SHM_MARGIN:g}x over), the target has "
                   f"{target.shm_gb * MB_PER_GB:.0f} MB")
    return Memory(ram, shm, not why, "; ".join(why) or None)


# --- predicting ---------------------------------------------------------------------------------


def resolve(target: Target, source: Source) -> ResolvedTarget:
    """The target with the source's figures where it gives none."""
    return ResolvedTarget(cores=float(target.cores if target.cores is not None else source.cores),
                          ranks=max(int(target.ranks or 1), 1),
                          step_ms=float(target.step_ms if target.step_ms is not None else source.step_ms),
                          scale=float(target.scale if target.scale is not None else source.scale),
                          ram_gb=target.ram_gb if target.ram_gb is not None else source.ram_gb,
                          shm_gb=target.shm_gb if target.shm_gb is not None else source.shm_gb)


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
    """Index of the cheapest config predicted within the tolerance of the predicted best; with
    `keep`, of those, first the ones that keep these settings (settings whose effect nothing
    measured shows: a figure kept neutral is no reason to change them)."""
    if not predicted:
        return None
    scored = [(i, t) for i, (_, t) in enumerate(predicted) if math.isfinite(t)]
    if not scored:
        return None
    best = max(t for _, t in scored)
    within = [i for i, t in scored if t >= (1 - tolerance) * best] or [max(scored, key=lambda it: it[1])[0]]

    def changed(settings: Mapping[str, Any]) -> int:
        s = applied(settings)
        return sum(format_value(s.get(k)) != format_value(v) for k, v in (keep or {}).items()
                   if s["num_workers"] or k not in NEEDS_WORKERS)

    return min(within, key=lambda i: (changed(predicted[i][0]), cost_of(predicted[i][0])))


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
    for name, value in (("cores", resolved.cores), ("step_ms", resolved.step_ms if step_given else 1.0),
                        ("scale", resolved.scale)):
        if not (math.isfinite(value) and value > 0):
            raise ResultsError(f"the target's {name} must be above 0, got {value:g}")
    if not 0 <= tolerance < 1:
        raise ResultsError(f"the tolerance must be at least 0 and below 1, got {tolerance:g}")
    if source.step_ms <= 0 and resolved.step_ms != source.step_ms:
        raise ResultsError(f"{where}: the measured step took no time, so another step time cannot be scaled from it")
    step_scale = resolved.step_ms / source.step_ms if source.step_ms > 0 else 1.0
    memory = memory_model(records)
    measured: dict[SettingsKey, float] = {}
    for r in measured_rows(records):
        if r.throughput is not None:  # each measured row has one
            measured.setdefault(settings_key(settings_of(r)), float(r.throughput))
    rows = []
    configs = space(records)
    keys = varying(configs)
    names = names_of(records)
    # A step timed on the target holds its ranks' collective; else the model adds what more ranks cost.
    collective = 0.0 if step_given else None
    for settings, p in predict_space(model, configs, resolved.cores, resolved.ranks, step_scale, collective):
        rows.append(TargetRow(names(settings, keys), settings, p.throughput, p.throughput / resolved.ranks,
                              p.wait_ratio, p.cpu_bound,
                              measured.get(settings_key(settings)) if _same_machine(source, resolved) else None,
                              _memory(memory.need(settings, resolved.ranks, resolved.scale), resolved)))
    neutral = unshown_figures(model, records, configs)
    fitting = [i for i, r in enumerate(rows) if r.memory.fits]
    chosen = choose([(rows[i].settings, rows[i].predicted_throughput) for i in fitting], tolerance,
                    unjudged(source, neutral))
    notes = [note] if note else []
    if not fitting:
        notes.append("no config fits the target's memory: see each row's memory")
    if chosen is not None:
        rows[fitting[chosen]] = replace(rows[fitting[chosen]], recommended=True)
    rows.sort(key=lambda r: -r.predicted_throughput)
    pick = next((r for r in rows if r.recommended), None)
    picked = settings_key(source.pick) if source.pick is not None else None
    source_pick = next((r for r in rows if settings_key(r.settings) == picked), None)
    beyond = extrapolations(source, resolved, step_given, model.collective_ms)
    kept, aside = kept_settings(loader)
    return Forecast(source, resolved, tuple(rows), pick, tuple(beyond), model,
                    tolerance, source_pick, tuple(notes), prediction_error(records), neutral, kept, tuple(aside))


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
    return result if info is not None else replace(result, unknown_rest=loader_file(path).name)


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
    step_ms = model.step_ms_per_sample * _batch_size(measured_rows(records))
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
        if settings_key(theirs.settings) == key or \
                ours.predicted_throughput >= (1 - tolerance) * theirs.predicted_throughput:
            same.append(label)  # the same pick, or a cheaper one there while the pick loses nothing
            continue
        moved.append(Travel(label, theirs.config, ours.predicted_throughput / theirs.predicted_throughput))
    return moved, same


# --- output -------------------------------------------------------------------------------------


def target_text(target: ResolvedTarget) -> str:
    cores = f"{target.cores:g} usable core{'' if target.cores == 1 else 's'}"
    ranks = f"{target.ranks} rank{'' if target.ranks == 1 else 's'}"
    return f"{cores}, {ranks}, a {target.step_ms:.1f} ms step"


def forecast_table(f: Forecast, width: int | None = None) -> Table:
    """Every config of the space, best predicted first: samples/s (all ranks; per rank with
    several), wait ratio, what the source measured where it is the same machine, memory where
    a config does not fit; the recommendation marked. At `width`, the least important columns
    are left out, and config names shortened, rather than a figure cut."""
    ranks = f.target.ranks > 1
    measured = any(r.measured_throughput is not None for r in f.rows)
    memory = any(not r.memory.fits for r in f.rows) or f.target.scale != f.source.scale
    notes = tuple(Text("recommended", style="bold green") if r.recommended else
                  Text("does not fit" if not r.memory.fits else "", style="yellow") for r in f.rows)
    figures = [Column("samples/s", tuple(f"{r.predicted_throughput:.1f}" for r in f.rows))]
    if ranks:
        figures.append(Column("per rank", tuple(f"{r.predicted_throughput_per_rank:.1f}" for r in f.rows), priority=2))
    figures.append(Column("wait ratio", tuple(f"{r.predicted_wait_ratio:.3f}" for r in f.rows), priority=1))
    if measured:
        figures.append(Column("measured", tuple(fmt(r.measured_throughput, 1) for r in f.rows), priority=3))
    if memory:
        figures.append(Column("RAM GB", tuple(fmt(r.memory.ram_gb, 1) for r in f.rows), priority=1))

    def columns(names: list[str]) -> list[Column]:
        styled = tuple(Text(n, style="bold" if r.recommended else "") for n, r in zip(names, f.rows))
        return [Column("config", styled, "left", names=True), *figures, Column("", notes, "left")]

    names = [r.config for r in f.rows]
    short = [short_trial(n) for n in names]
    return fitted_table([columns(names), columns(short)], width, f"Predicted for {target_text(f.target)}")


def forecast_lines(f: Forecast) -> list[str]:
    """The closing words: the recommendation, what the sweep's own pick would lose there, what
    is extrapolated, what does not fit, and what to paste."""
    source = replace(f.target, cores=f.source.cores, ranks=f.source.ranks, step_ms=f.source.step_ms)
    measured = f"Measured on {target_text(source)}" + (f" (the run, {f.source.run} watched)" if f.source.run else "")
    if f.model.trials == 1:
        lines = [f"{measured}; fitted to 1 measured config: the model could not be checked against a second "
                 "measured config, so how far off its predictions are here is not known"]
    else:
        lines = [f"{measured}; {f.model.trials} trials fitted", str(f.model_error)]
    lines.extend(neutral_lines(f))
    pick = f.recommended
    if pick is None:
        return [*lines, *f.notes]
    lines.append(f"Recommended for {target_text(f.target)}: {pick.config}: {pick.predicted_throughput:.1f} samples/s"
                 f"{' in all' if f.target.ranks > 1 else ''}, wait ratio {pick.predicted_wait_ratio:.3f} (predicted; "
                 f"the cheapest within {f.tolerance:.0%} of the best)")
    share = f.carried_share
    own = "The run's own settings" if f.source.run else "The sweep's own pick"
    if f.source_pick is not None and share is not None and f.source_pick.settings != pick.settings:
        if share >= 1 - f.tolerance:
            lines.append(f"{own} ({f.source_pick.config}) would do as well there ({share:.2f} of it); "
                         f"the recommendation costs less.")
        else:
            lines.append(f"{own} ({f.source_pick.config}) would run {share:.2f} of that there.")
    elif f.source_pick is not None:
        lines.append("The run's own settings are the recommendation: keep them." if f.source.run else
                     "The sweep's own pick is the same: it travels.")
    lines += [f"Extrapolated: {e}." for e in f.extrapolated]
    unfit = [r for r in f.rows if not r.memory.fits]
    if unfit:
        lines.append(f"Does not fit: {len(unfit)} config{'' if len(unfit) == 1 else 's'}, e.g. {unfit[0].config}: "
                     f"{unfit[0].memory.why}.")
    lines += list(f.notes)
    lines += [str(w) for w in wait_words(f)]
    aside = f"; keep {', '.join(f.aside)} as in your code" if f.aside else ""
    if f.unknown_rest is not None:
        aside += (f"; keep your DataLoader's other settings (shuffle, drop_last, a sampler, ...) as in your code: "
                  f"no {f.unknown_rest} beside the CSV says them")
    lines.append(f"Paste (each rank): {dataloader_line(paste_settings(pick.settings, f.kept))}{aside}")
    return lines


# The recommendation waits this much more (in wait ratio) than a config predicted as fast: said why.
WAITS_MORE = 0.10


def wait_words(f: Forecast) -> list[CheaperWaitsMore]:
    """Where the recommendation (the cheapest within the tolerance of the best samples/s) waits
    clearly more than a config predicted about as fast: why, in one line."""
    pick = f.recommended
    if pick is None:
        return []
    best = max(r.predicted_throughput for r in f.rows if r.memory.fits)
    tied = [r for r in f.rows if r.memory.fits and r.predicted_throughput >= (1 - f.tolerance) * best]
    lean = min(tied, key=lambda r: r.predicted_wait_ratio)
    if pick.predicted_wait_ratio - lean.predicted_wait_ratio <= WAITS_MORE:
        return []
    return [CheaperWaitsMore(pick.config, pick.predicted_wait_ratio, lean.config, lean.predicted_wait_ratio,
                             lean.predicted_throughput / pick.predicted_throughput, f.tolerance, f.target.ranks)]


# What each figure model.unshown_figures names costs, in words.
FIGURE_WORDS = {
    "handover_ms_per_sample": "the hand-over from workers",
    "worker_start_ms": "the workers' start at each epoch",
    "worker_start_per_worker_ms": "each more worker's start",
    "persistent_resume_ms": "persistent workers' resume",
    "worker_put_ms": "a worker's put into shared memory",
    "core_share": "crowded cores",
    "oversubscription": "",
    "h2d_pinned_ms": "the copy from pinned memory",
    "step_sync": "the step's threads waiting for each other on crowded cores",
}


def neutral_lines(f: Forecast) -> list[str]:
    """One line naming the figures no measured config shows, kept neutral, and the run that
    would show them; none where every figure a config predicted needs was measured."""
    if not f.neutral:
        return []
    runs: dict[str, list[str]] = {}
    for name, run in f.neutral:
        runs.setdefault(run, []).append(name)
    parts = []
    for run, names in runs.items():
        words = ", ".join(w for w in (FIGURE_WORDS.get(n, n) for n in names) if w)
        parts.append(f"{words} ({', '.join(names)}), shown by a run with {run}")
    return [f"Kept neutral, as no measured config shows them (configs that need them are predicted without that "
            f"cost): {'; '.join(parts)}."]


def write_forecast(f: Forecast, path: Path | str) -> Path:
    """The predicted rows as CSV (Forecast.table_rows), booleans as true/false."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{k: format_value(v) if isinstance(v, bool) else v for k, v in row.items()} for row in f.table_rows()]
    frame = pd.DataFrame(rows, dtype=object)
    try:
        frame.to_csv(path, index=False)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path


# --- compare: what A's model said of B's machine --------------------------------------------------

# B's step differs from A's by more than this share: B's step is part of its machine.
STEP_DIFFERS = 0.10


@dataclass(frozen=True)
class TransferCheck:
    """What the model fitted to one file predicted for another file's machine, against what that
    file measured there."""

    target: ResolvedTarget
    predicted_pick: str  # the config the model recommended for B's machine
    pick_measured_share: float | None  # its measured throughput in B / B's measured best (None: B did not measure it)
    measured_best: str  # B's fastest measured config
    median_error: float  # median |predicted / measured - 1| over B's measured configs
    compared: int
    predicted: dict[str, float]  # B's trial name -> what A's model predicted for it on B's machine


def machine_of(records: Sequence[Record]) -> Machine:
    """(usable cores of the machine, ranks, median step per sample)."""
    rows = measured_rows(records)
    first = evidence_of(rows[0])
    assert first is not None  # a measured row has evidence
    steps = [float(r.step_ms) / r.batch_size for r in rows if r.step_ms is not None and r.batch_size]
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
    if not any(r.fetch_ms is not None for r in measured_rows(a)) or not measured_rows(b):
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


# --- compare: what a sweep said of a real run's config --------------------------------------------

# A run agrees with what the sweep said of its config when its throughput is within this share of
# the sweep's figure and its wait ratio within this much of it.
RUN_AGREES_SHARE = 0.10
RUN_AGREES_WAIT_RATIO = 0.05
MEASURED, PREDICTED = "measured", "predicted"


@dataclass(frozen=True)
class RunCheck:
    """What a sweep said of a watched loader's config (measured, where the sweep ran that config
    on a machine like the run's; else predicted by its model for the run's machine), beside what
    the real run measured."""

    trial: str  # the watched loader, its ranks combined
    config: str  # its settings
    ranks: int
    throughput: float  # what the run measured, all ranks
    wait_ratio: float
    sweep_throughput: float | None  # what the sweep said of this config (None: it cannot say)
    sweep_wait_ratio: float | None
    figure: str | None  # MEASURED or PREDICTED
    sweep_trial: str | None = None  # the sweep's trial of this config, where it measured it
    target: ResolvedTarget | None = None  # the run's machine, where predicted for it
    pick: str | None = None  # the config the sweep's model recommends for the run's machine
    pick_throughput: float | None = None  # and its prediction there

    @property
    def ratio(self) -> float | None:
        """The run's throughput / the sweep's figure for it."""
        return self.throughput / self.sweep_throughput if self.sweep_throughput else None

    @property
    def agrees(self) -> bool | None:
        """Within RUN_AGREES_SHARE in throughput and RUN_AGREES_WAIT_RATIO in wait ratio."""
        if self.ratio is None or self.sweep_wait_ratio is None:
            return None
        return abs(self.ratio - 1) <= RUN_AGREES_SHARE and \
            abs(self.wait_ratio - self.sweep_wait_ratio) <= RUN_AGREES_WAIT_RATIO


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
        base = RunCheck(str(loader.trial), name(settings, keys), int(loader.ranks or 1),
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
