"""The pipeline model (docs/model.md): what every DataLoader config of a sweep's space would do,
fitted to the evidence of the trials measured so far.

`fit` reads the costs each trial shows (fetch CPU and waiting, hand-over, step, copy, epoch
start-up, usable cores) over all measured trials together (figures), then fits the figures no
single column shows by how well the whole model explains the measured throughputs.
`PipelineModel.predict` (pipeline) simulates the DataLoader's own protocol for any config (see
simulation.simulate), capped by what the cores can do. Settings the mechanism does not cover (the
thread settings) get a measured factor. A step that runs on several threads (torch's intra-op
threads) crowds with the workers as its threads wait for each other (step_sync). Offline (numpy
only): the readers use it without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from loadtune.asked.trials import IDEAL, effective_settings, format_value
from loadtune.core.errors import ResultsError
from loadtune.model.evidence import Evidence, evidence_of, run_epoch_samples
from loadtune.model.figures import base_figures, quiet_steps, step_cpu_figure, step_cpu_ms, uncontended
from loadtune.model.fitted import PipelineModel, Prediction, predict_rank, rank_cores, starting
from loadtune.record.record import Record, missing_columns

# Settings the queueing mechanism explains; any other swept key is a measured factor.
MECHANISM_KEYS = frozenset({"num_workers", "prefetch_factor", "persistent_workers", "batch_size", "pin_memory"})
# Candidate values of the two fitted figures, searched in full (a handful of trials cannot
# support a finer fit, and a grid never wanders off to an absurd optimum).
FITTED_GRIDS: dict[str, tuple[float, ...]] = {
    "fetch_cv": (0.0, 0.15, 0.3, 0.5, 0.75, 1.0),
    "worker_put_ms": (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0),
    "core_share": (1.0, 0.85, 0.7, 0.55, 0.4),
    "oversubscription": (0.0, 0.03, 0.08, 0.15, 0.3),
    "step_sync": (0.0, 0.5, 1.0, 2.0, 4.0, 8.0),
}
FIT_PASSES = 3  # coordinate search over the grids, from their middles
FIT_PARSIMONY = 0.10  # a figure nearer neutral is kept when the loss is within this share of the best
FIT_PARSIMONY_FLOOR = 1e-4  # and this much (the loss of a few trials off by about 1%)
HUBER_LOG_ERROR = 0.05  # log errors beyond this count linearly in the fit, not squared
# A model fitted to fewer measured trials than this predicts nothing.
MIN_TRIALS_TO_FIT = 2
# A step timed only beside workers (own_step): the fitted figures searched again at most this
# many times with the step's own cost read anew after each search, and each reading a fixed point
# of at most OWN_STEP_ROUNDS rounds, done when the step moves less than OWN_STEP_TOLERANCE of itself.
OWN_STEP_REFITS = 3
OWN_STEP_ROUNDS = 8
OWN_STEP_TOLERANCE = 1e-4


def _core_prediction(model: PipelineModel, e: Evidence) -> Prediction:
    """The mechanism's prediction for a measured trial, without the factors."""
    s = e.settings
    h2d = model.costs.h2d_pinned_ms if s["pin_memory"] else model.costs.h2d_ms
    return predict_rank(model, e.batch_size, e.workers, int(s["prefetch_factor"] or 0),
                        bool(s["persistent_workers"]), h2d, rank_cores(model, model.cores * model.ranks, model.ranks),
                        1.0, model.cores)


def _explained(e: Evidence, baseline: Mapping[str, Any]) -> bool:
    """Whether the mechanism alone should explain this trial: it changes no unexplained setting."""
    return all(e.settings.get(k) == baseline.get(k) for k in e.settings if k not in MECHANISM_KEYS)




def fit(records: Sequence[Record], dataset_len: int | None = None,
        baseline: Mapping[str, Any] | None = None, min_trials: int = MIN_TRIALS_TO_FIT) -> PipelineModel | None:
    """The model fitted to every measured record at once, or None with fewer than `min_trials`
    (MIN_TRIALS_TO_FIT: what a sweep fits to; `loadtune predict` fits one measured config, the
    figures it cannot show kept neutral: see unshown_figures). `dataset_len`: samples in one of
    the run's epochs (default: what the records say, run_epoch_samples). `baseline` holds the
    settings unexplained keys are factors against (default: the most common value of each among
    the records)."""
    evidence = [e for r in records if (e := evidence_of(r)) is not None]
    if len(evidence) < max(min_trials, 1):
        return None
    if dataset_len is None:
        dataset_len = run_epoch_samples(records)
    base = _factor_baseline(evidence, baseline)
    model = base_figures(evidence, dataset_len)
    # The fitted figures from the trials the mechanism alone should explain; a step timed only
    # beside workers is read anew as they are fitted (own_step), and they are fitted again on it.
    core = [e for e in evidence if _explained(e, base)] or evidence
    for _ in range(OWN_STEP_REFITS):
        model = _fitted(model, _search(model, core))
        own = own_step(model, evidence)
        settled = own.step_threads == model.step_threads and \
            math.isclose(own.costs.step_ms_per_sample, model.costs.step_ms_per_sample, rel_tol=OWN_STEP_TOLERANCE)
        model = own
        if settled:
            break
    model = replace(model, factors=_factors(model, evidence, base))
    residuals = [math.log(e.throughput * model.ranks / model.predict(e.settings).throughput) for e in evidence]
    spread = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if residuals else 0.0
    return replace(model, residual_log_sd=spread)


def own_step(model: PipelineModel, evidence: Sequence[Evidence]) -> PipelineModel:
    """The model with the step's own cost where no trial timed the step without workers (one
    rank): each trial's timed step less the crowding the model predicts for its config (its
    step's CPU phase stretched beside the workers, see crowding.step_stretch), in ms per sample,
    the median over the trials the step is read from (figures: those with the fewest workers on
    several threads, the uncontended on one), so the model predicts their step as timed. The
    step's threads likewise: its CPU over its own wall time, not over the stretched one (unless
    every trial set main_threads). A fixed point: the step's length sets how busy the training
    thread is, so how much it is crowded. Without workers in a trial that timed the step, or on
    ranks (their step is read where the workers had every batch ready), the model as it is."""
    timed = [e for e in evidence if e.step_ms is not None]
    if model.ranks > 1 or not timed or any(e.workers == 0 for e in timed):
        return model
    set_to = {e.settings.get("main_threads") for e in evidence}
    threads_set = len(set_to) == 1 and None not in set_to
    cores = max(1, math.floor(min(e.cores for e in evidence)))
    threads, step = model.step_threads, model.costs.step_ms_per_sample
    for _ in range(OWN_STEP_ROUNDS):
        candidate = _with_step(model, evidence, threads, step)
        own = {id(e): _own_step_ms(candidate, e) for e in timed}
        read = quiet_steps(timed) if threads > 1 else uncontended(timed)  # as figures reads the step
        step = statistics.median(own[id(e)] / e.batch_size for e in read)
        cpu = [c / own[id(e)] for e in quiet_steps(timed)
               if own[id(e)] > 0 and (c := step_cpu_ms(e, model.costs.handover_ms_per_sample)) is not None]
        if cpu and not threads_set:
            threads = int(min(max(round(statistics.median(cpu)), 1), cores))
        if threads == candidate.step_threads and \
                math.isclose(step, candidate.costs.step_ms_per_sample, rel_tol=OWN_STEP_TOLERANCE):
            break
    return _with_step(model, evidence, threads, step)


def _own_step_ms(model: PipelineModel, e: Evidence) -> float:
    """A trial's step in ms per batch less the crowding `model` predicts its workers add to it."""
    crowding = _core_prediction(model, e).step_ms - model.costs.step_ms_per_sample * e.batch_size
    return max(float(e.step_ms or 0.0) - crowding, 0.0)


def _with_step(model: PipelineModel, evidence: Sequence[Evidence], threads: int, step: float) -> PipelineModel:
    """The model with a step of `step` ms per sample on `threads` threads, its CPU on each read as
    figures.base_figures reads it (over every trial on one thread, over the trials with the fewest
    workers on several), at most the step."""
    cpu = step_cpu_figure(evidence, threads, model.costs.handover_ms_per_sample)
    step_cpu = min(max(cpu, 0.0), step) if cpu is not None else model.costs.step_cpu_ms_per_sample
    costs = replace(model.costs, step_ms_per_sample=step, step_cpu_ms_per_sample=step_cpu)
    return replace(model, costs=costs, step_threads=threads)


def _factor_baseline(evidence: Sequence[Evidence], baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """`baseline`, each setting it lacks at its most common value among the trials (the first
    trial's spelling of it)."""
    base = dict(baseline or {})
    for key in evidence[0].settings:
        if key not in base:
            values = [format_value(e.settings.get(key)) for e in evidence]
            common = max(set(values), key=values.count)
            base[key] = next(e.settings.get(key) for e in evidence if format_value(e.settings.get(key)) == common)
    return effective_settings(base)


def _search(model: PipelineModel, core: Sequence[Evidence]) -> dict[str, float]:
    """The figures of FITTED_GRIDS the trials can show, by a coordinate search over their grids
    from the middles and from the neutral values (the first of each grid; the better of the two),
    then each as near its neutral value as explains the trials all but as well: a handful of
    trials cannot tell a figure from its neighbours, and a figure pushed to an extreme to explain
    one more trial moves every prediction for another machine."""
    logs = np.log([e.throughput for e in core])
    grids = {name: grid for name, grid in FITTED_GRIDS.items() if _can_show(name, model, core)}
    params = {name: grid[len(grid) // 2] for name, grid in grids.items()}
    losses: dict[tuple[float, ...], float] = {}

    def loss_at(figures: dict[str, float]) -> float:
        point = tuple(figures.values())
        if point not in losses:
            losses[point] = _loss(_fitted(model, figures), core, logs)
        return losses[point]

    def descend(params: dict[str, float]) -> dict[str, float]:
        for _ in range(FIT_PASSES):
            moved = False
            for name, grid in grids.items():
                best = min((loss_at({**params, name: value}), value) for value in grid)[1]
                if best != params[name]:
                    params[name], moved = best, True
            if not moved:
                break
        return params

    # From the middles, and from the neutral corner: the figures trade off against each other
    # (on ranks sharing cores, crowding and variation both slow the pace), so one start can stop
    # where no single figure's move helps. step_sync starts where the step's own times put it:
    # the throughputs alone share its effect with the other crowding figures.
    starts = [params, {name: grid[0] for name, grid in grids.items()}]
    if "step_sync" in grids:
        for start in starts:
            start["step_sync"] = min(grids["step_sync"], key=lambda v: _step_loss(
                _fitted(model, {**start, "step_sync": v}), core))
    params = min((descend(start) for start in starts), key=loss_at)
    threshold = min(losses.values(), default=0.0) * (1 + FIT_PARSIMONY) + FIT_PARSIMONY_FLOOR
    for name, grid in grids.items():
        for value in grid[:grid.index(params[name])]:
            if loss_at({**params, name: value}) <= threshold:
                params[name] = value
                break
    return params


def _loss(candidate: PipelineModel, core: Sequence[Evidence], logs: np.ndarray) -> float:
    """Huber's loss on the log errors of the throughputs: squared while small, linear beyond
    HUBER_LOG_ERROR, so one process far off (a busy moment of the machine) pulls the fit no
    more than that."""
    return _huber(np.abs(np.log([_core_prediction(candidate, e).throughput for e in core]) - logs))


def _step_loss(candidate: PipelineModel, core: Sequence[Evidence]) -> float:
    """Huber's loss on the log errors of the step's wall time in the trials with workers: how well
    the model explains how much each trial's workers crowded its step (where step_sync starts)."""
    guesses = [_core_prediction(candidate, e) for e in core]
    steps = [(g.step_ms, e.step_ms) for g, e in zip(guesses, core) if e.workers and e.step_ms and g.step_ms > 0]
    if not steps:
        return 0.0
    return _huber(np.abs(np.log([g for g, _ in steps]) - np.log([m for _, m in steps])))


def _huber(error: np.ndarray) -> float:
    return float(np.sum(np.where(error <= HUBER_LOG_ERROR, error ** 2 / 2,
                                 HUBER_LOG_ERROR * (error - HUBER_LOG_ERROR / 2))))


def _factors(model: PipelineModel, evidence: Sequence[Evidence],
             base: Mapping[str, Any]) -> tuple[tuple[str, str, float], ...]:
    """Unexplained settings: each value's measured effect against the mechanism's prediction
    (the median ratio over the trials with it)."""
    factors = []
    for key in sorted(k for k in base if k not in MECHANISM_KEYS):
        by_value: dict[str, list[float]] = {}
        for e in evidence:
            shown = format_value(e.settings.get(key))
            if shown != format_value(base.get(key)):
                core_guess = _core_prediction(model, e)
                by_value.setdefault(shown, []).append(e.throughput / core_guess.throughput)
        factors += [(key, value, statistics.median(ratios)) for value, ratios in sorted(by_value.items())]
    return tuple(factors)


def _fitted(model: PipelineModel, figures: Mapping[str, float]) -> PipelineModel:
    """The model with the fitted figures given (FITTED_GRIDS' names)."""
    return replace(model, fitted=replace(model.fitted, **figures))


def _can_show(name: str, model: PipelineModel, evidence: Sequence[Evidence]) -> bool:
    """Whether the measured trials can show a fitted figure at all: what workers do needs a
    trial with workers; what crowded cores cost, a trial with more busy threads than cores."""
    if name == "fetch_cv":
        return True
    if not any(e.workers for e in evidence):
        return False
    if name == "worker_put_ms":
        return True
    if name == "step_sync":
        return model.step_threads > 1
    share = model.costs.fetch_cpu_share
    return any(e.workers * share + 1 > e.cores for e in evidence if e.workers)


# The runs that show a figure no measured config showed (unshown_figures).
RUN_WITH_WORKERS = "num_workers > 0"
RUN_RESTARTING_WORKERS = "num_workers > 0 and persistent_workers=False, over more than one epoch"
RUN_OTHER_WORKER_COUNT = "another num_workers, without persistent workers"
RUN_PERSISTENT_WORKERS = "num_workers > 0 and persistent_workers=True, over more than one epoch"
RUN_CROWDED = "more busy workers than cores"
RUN_PINNED = "pin_memory=True"


def unshown_figures(model: PipelineModel, records: Sequence[Record],
                    configs: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The model's figures that no measured record shows, so `fit` kept them at their neutral
    values (no cost), and that a config of `configs` depends on: (figure, the run that would
    show it). Without workers in any measured config: everything workers cost; with workers
    that never restart: their start-up; and so on."""
    evidence = [e for r in records if (e := evidence_of(r)) is not None]
    asked = [effective_settings(c) for c in configs]
    with_workers = [c for c in asked if c["num_workers"]]
    out: list[tuple[str, str]] = []
    if not with_workers:
        return ()
    workers = [e for e in evidence if e.workers]
    if not any(e.loading.handover_ms is not None for e in workers):
        out.append(("handover_ms_per_sample", RUN_WITH_WORKERS))
    epochs = model.dataset_len is not None
    restarting = [e for e in workers if not e.settings["persistent_workers"] and e.loading.epoch_start_ms is not None]
    asked_restarting = {int(c["num_workers"]) for c in with_workers if not c["persistent_workers"]}
    if epochs and asked_restarting and not restarting:
        out += [("worker_start_ms", RUN_RESTARTING_WORKERS), ("worker_start_per_worker_ms", RUN_RESTARTING_WORKERS)]
    elif epochs and len({starting(e.workers, e.cores) for e in restarting}) == 1 and \
            asked_restarting - {e.workers for e in restarting}:
        out.append(("worker_start_per_worker_ms", RUN_OTHER_WORKER_COUNT))
    if epochs and any(c["persistent_workers"] for c in with_workers) and \
            not any(e.settings["persistent_workers"] and e.loading.epoch_start_ms is not None for e in workers):
        out.append(("persistent_resume_ms", RUN_PERSISTENT_WORKERS))
    if not _can_show("worker_put_ms", model, evidence):
        out.append(("worker_put_ms", RUN_WITH_WORKERS))
    if model.step_threads > 1 and not _can_show("step_sync", model, evidence):
        out.append(("step_sync", RUN_WITH_WORKERS))
    share = model.costs.fetch_cpu_share
    if not _can_show("core_share", model, evidence) and \
            any(int(c["num_workers"]) * share + 1 > model.cores for c in with_workers):
        out += [("core_share", RUN_CROWDED), ("oversubscription", RUN_CROWDED)]
    if model.costs.h2d_ms > 0 and any(c["pin_memory"] for c in asked) and \
            not any(e.settings["pin_memory"] for e in evidence):
        out.append(("h2d_pinned_ms", RUN_PINNED))
    return tuple(out)


def leave_one_out_error(records: Sequence[Record], dataset_len: int | None = None) -> float | None:
    """Median |predicted / measured - 1| of each measured trial, predicted by the model fitted to
    the others: how well the model predicts a trial it was not fitted to. None with too few."""
    usable = [r for r in records if evidence_of(r) is not None]
    if len(usable) <= MIN_TRIALS_TO_FIT:
        return None
    errors = []
    for i, record in enumerate(usable):
        model = fit(usable[:i] + usable[i + 1:], dataset_len or run_epoch_samples(usable))
        if model is None:
            continue
        evidence = evidence_of(record)
        assert evidence is not None
        errors.append(abs(model.predict(evidence.settings).throughput / (evidence.throughput * model.ranks) - 1))
    return statistics.median(errors) if errors else None


@dataclass(frozen=True)
class ModelReport:
    """The fitted model as the summary and --json show it."""

    model: PipelineModel
    error: float | None  # median |predicted/measured - 1| over trials predicted before they ran
    checked: int  # how many such trials
    fell_back: bool = False  # the error was too large: the sweep measured as ofat does
    ties: tuple[tuple[str, str], ...] = field(default=())  # pairs the model and the data tied

    def to_json(self) -> dict[str, Any]:
        return {**self.model.to_json(), "error": None if self.error is None else round(self.error, 4),
                "error_trials": self.checked, "fell_back_to_ofat": self.fell_back}


# What the model reads of each row: a file without these was written before the model existed.
MODEL_COLUMNS = ("fetch_ms", "fetch_cpu_share", "handover_ms", "step_ms", "main_cpu_util", "epoch_start_ms",
                 "cpu_count")


def check_columns(path: Path | str) -> None:
    """A file written before the model's evidence columns cannot be predicted from: say which."""
    missing = missing_columns(path, MODEL_COLUMNS)
    if missing:
        raise ResultsError(f"{path}: cannot predict from this file: it lacks the columns {', '.join(missing)} "
                           "(written by an older loadtune); rerun the sweep with this version (--overwrite replaces "
                           "the file)")


def prediction_error(records: Sequence[Record]) -> tuple[float | None, int]:
    """Median |predicted/measured - 1| over the measured records that carry a prediction made
    before they ran, and how many there were."""
    errors = [abs(r.assessment.predicted_throughput / r.throughput - 1) for r in records
              if r.ran and r.trial != IDEAL and r.assessment.predicted_throughput and r.throughput]
    return (statistics.median(errors) if errors else None), len(errors)
