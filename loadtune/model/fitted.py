"""The fitted pipeline (docs/model.md) and what it predicts for any DataLoader config: the
DataLoader's protocol simulated (simulation.simulate) at the pace the crowded cores set
(crowding), capped by what the cores can do. Settings the mechanism does not cover (the thread
settings) get a measured factor."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, Mapping

from loadtune.asked.trials import effective_settings, format_value
from loadtune.model.crowding import contention, step_stretch
from loadtune.model.simulation import simulate

# CPU phases stretched by more than this share of their time: the cores, not the queue, set the pace.
CROWDED_STRETCH = 1.05
# Where the cores are short even without crowding, the period lies between their cap and the
# crowded simulation; a fetch of pure CPU work sits this far from the crowding towards the cap.
# Measured on one core (benchmarks/transfer.py, the cpu pipeline: 12.2-13 ms of CPU a batch, periods
# of 12.4-17 ms as workers and prefetch grow: the core idles while it queues), both bounds were
# off by about as much.
SATURATED_CAP_WEIGHT = 0.5
# A batch takes at least this long (a free fetch and step would otherwise divide by zero).
MIN_PERIOD_MS = 1e-6
# A step's collective among ranks of one host (DDP's all_reduce: ranks meet at every step), in
# ms, where nothing measured says. A small all_reduce between processes of one host is latency,
# waking each rank: measured with gloo on 2 cores (benchmarks/transfer.py's grids, their ideal rows,
# the step fed from memory) 0.92 and 0.82 ms more a step with 2 ranks than with 1 (cpu, io), 0.74 ms
# with 4: no growth from 2 ranks to 4. A step timed on the target's ranks (`--step-ms`) holds its
# own collective instead.
COLLECTIVE_MS = 0.85


@dataclass(frozen=True)
class Prediction:
    """What the model expects of one config: samples per second and the wait ratio."""

    throughput: float
    wait_ratio: float
    period_ms: float  # per batch, epoch starts spread over the epoch
    cpu_bound: bool  # the cores, not the queue, set the pace
    fetch_hidden: bool = False  # the workers outpace the loop on the cores they have: its own time sets the pace
    step_ms: float = 0.0  # the step's wall time per batch, crowded as the config crowds it


@dataclass(frozen=True)
class MeasuredCosts:
    """The costs the measured trials show directly (figures.base_figures), combined over them.
    Per-sample costs (a batch of B costs B times as much), in ms."""

    fetch_cpu_ms_per_sample: float  # CPU a loading process spends per sample (read, decode, augment, collate)
    fetch_wait_ms_per_sample: float  # the rest of a fetch: waiting on storage, the network, sleeps
    main_fetch_ms_per_sample: float | None  # a fetch in the training process itself (num_workers=0), as measured
    handover_ms_per_sample: float  # the training thread's CPU to receive a batch from a worker
    step_ms_per_sample: float  # the step's wall time, uncontended
    step_cpu_ms_per_sample: float  # the part of it that is host CPU (competes with the workers)
    h2d_ms: float  # copy to the device per batch (pinned or not: see h2d_pinned_ms)
    h2d_pinned_ms: float
    worker_start_ms: float  # an epoch's start without persistent workers: fixed part
    worker_start_per_worker_ms: float  # and per worker, on a core of its own (see starting)
    persistent_resume_ms: float  # an epoch's start with persistent workers

    @property
    def fetch_cpu_share(self) -> float:
        """The share of a fetch that is CPU work (0 where a fetch costs nothing)."""
        fetch = self.fetch_cpu_ms_per_sample + self.fetch_wait_ms_per_sample
        return self.fetch_cpu_ms_per_sample / fetch if fetch > 0 else 0.0


@dataclass(frozen=True)
class FittedFigures:
    """The figures no single column shows, fitted by how well the whole model explains the
    measured throughputs (the names of model.FITTED_GRIDS); each neutral at its first value there."""

    fetch_cv: float = 0.0  # batch-to-batch variation of a fetch
    oversubscription: float = 0.0  # extra CPU per busy thread beyond the cores, as a share
    worker_put_ms: float = 0.0  # a worker's CPU per batch beyond its fetch: putting it into shared memory
    core_share: float = 1.0  # what each core beyond the first adds for CPU-bound threads (< 1 on shared cores)
    # A step on several threads: how much more its CPU phase stretches, per busy thread beyond the
    # cores, than its share of the cores says (its threads wait for each other at every parallel
    # op, and spin while they wait; 0 where the step runs on one thread).
    step_sync: float = 0.0


@dataclass(frozen=True)
class PipelineModel:
    """The fitted pipeline: its measured costs, its fitted figures, and the machine and run it
    was fitted on."""

    costs: MeasuredCosts
    fitted: FittedFigures
    cores: float  # usable cores (affinity and quota) of each rank it was fitted on
    dataset_len: int | None  # samples in one of the run's epochs (per rank), for any batch size's epoch length
    factors: tuple[tuple[str, str, float], ...] = ()  # (key, value, measured factor) of unexplained settings
    ranks: int = 1  # ranks it was fitted on, each with its own DataLoader, sharing the cores
    trials: int = 0  # measured trials it was fitted to
    residual_log_sd: float = 0.0  # spread of log(measured / predicted) over them
    # A step's collective among ranks (the fitted step holds it where it was fitted on ranks).
    collective_ms: float = COLLECTIVE_MS
    # Threads the step's host CPU runs on at once (torch's intra-op threads), as measured: its
    # CPU over its wall time without workers. The step's CPU work is step_cpu × step_threads.
    step_threads: int = 1

    def figure(self, name: str) -> float | None:
        """One of the model's figures by its name (as to_json names it), wherever the model keeps it."""
        part = next((p for p in (self.costs, self.fitted) if name in {f.name for f in fields(p)}), self)
        value: float | None = getattr(part, name)
        return value

    # --- predicting --------------------------------------------------------------------------

    def epoch_length(self, batch_size: int, ranks: int | None = None) -> float:
        """Batches per epoch of the run for this batch size on each of `ranks` ranks (default: as
        fitted; a DistributedSampler gives each rank its share), inf when unknown: no epoch starts
        modelled. Epochs end at the dataset's end, as in training: a sweep's figures are the
        run's (loadtune.record.run_epochs), whatever its windows cut."""
        if not self.dataset_len:
            return math.inf
        share = self.dataset_len * self.ranks / (self.ranks if ranks is None else max(ranks, 1))
        return float(math.ceil(share / batch_size))

    def added_collective_ms(self, ranks: int) -> float:
        """What a step's collective among `ranks` ranks adds to the fitted step (which holds one
        where it was fitted on ranks; negative where it did and one rank is asked for)."""
        return self.collective_ms * (int(ranks > 1) - int(self.ranks > 1))

    def predict(self, kwargs: Mapping[str, Any], cores: float | None = None, step_scale: float = 1.0,
                ranks: int | None = None, collective_ms: float | None = None) -> Prediction:
        """The config's throughput (samples/s, all ranks together) and wait ratio, on `cores`
        usable cores (default: the ones it was fitted on) shared by `ranks` ranks (default: as
        fitted), each with its own DataLoader, with the step's time scaled by `step_scale` and
        `collective_ms` added to each step (default: what the ranks' collective adds, see
        added_collective_ms; give 0 with a step timed on the target's ranks)."""
        ranks = self.ranks if ranks is None else max(ranks, 1)
        s = effective_settings(kwargs)
        batch = int(s["batch_size"] or kwargs.get("batch_size") or 1)
        workers = int(s["num_workers"] or 0)
        prefetch = int(s["prefetch_factor"] or 0)
        machine = self.cores * self.ranks if cores is None else cores
        h2d = self.costs.h2d_pinned_ms if s["pin_memory"] else self.costs.h2d_ms
        extra = self.added_collective_ms(ranks) if collective_ms is None else collective_ms
        core = predict_rank(self, batch, workers, prefetch, bool(s["persistent_workers"]), h2d,
                            max(rank_cores(self, machine, ranks), 0.05), step_scale, machine / ranks,
                            ranks=ranks, collective_ms=extra)
        factor = 1.0
        for key, value, f in self.factors:
            if format_value(s.get(key, kwargs.get(key))) == value:
                factor *= f
        throughput = core.throughput * factor * max(ranks, 1)
        return replace(core, throughput=throughput, period_ms=core.period_ms / factor)

    def to_json(self) -> dict[str, Any]:
        """Every figure under its own name, in one mapping (floats to 4 places)."""
        fitted = asdict(self.fitted)
        out = {**asdict(self.costs), "cores": self.cores, **{k: v for k, v in fitted.items() if k != "step_sync"},
               "dataset_len": self.dataset_len,
               "factors": [{"key": k, "value": v, "factor": f} for k, v, f in self.factors],
               "ranks": self.ranks, "trials": self.trials, "residual_log_sd": self.residual_log_sd,
               "collective_ms": self.collective_ms, "step_threads": self.step_threads, "step_sync": fitted["step_sync"]}
        return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}


def rank_cores(model: PipelineModel, machine_cores: float, ranks: int) -> float:
    """What each of `ranks` ranks gets of a machine's usable cores, in cores that work like the
    first: each core beyond the first adds `core_share`, a figure of the machine (cores that share
    a physical core, caches, memory bandwidth), so ranks share the working cores between them.
    Measured (benchmarks/transfer.py): two ranks decoding JPEGs without workers took 24% longer a
    fetch than one rank did; a fetch that spins until its own thread time has passed took no
    longer, as hyperthreads do not show in a thread's time."""
    working = 1 + (machine_cores - 1) * model.fitted.core_share if machine_cores > 1 else machine_cores
    return working / max(ranks, 1)


def starting(workers: int, cores: float) -> float:
    """Worker start-ups an epoch's start waits for, one after another: W workers start at once on
    min(W, cores) of the rank's usable cores (starting a worker is CPU work)."""
    return workers / max(min(workers, cores), 0.05)


def predict_rank(model: PipelineModel, batch: int, workers: int, prefetch: int, persistent: bool, h2d_ms: float,
                 cores: float, step_scale: float = 1.0, usable_cores: float | None = None, ranks: int | None = None,
                 collective_ms: float = 0.0) -> Prediction:
    """One rank's prediction on `cores` working cores (its share of the machine's, see
    rank_cores), with `ranks` ranks (default: as fitted) in step sharing the machine; its usable
    cores (default: `cores`) set how many workers start at once. `collective_ms` is added to each
    step (waiting, not CPU)."""
    ranks = model.ranks if ranks is None else ranks
    costs = model.costs
    step_cpu = costs.step_cpu_ms_per_sample * batch * step_scale
    step = max(costs.step_ms_per_sample * batch * step_scale + collective_ms, step_cpu, 0.0)
    case = _Case(
        loader=_Loader(batch=batch, workers=workers, prefetch=prefetch, persistent=persistent,
                       epoch=model.epoch_length(batch, ranks)), cores=cores,
        fetch_cpu=costs.fetch_cpu_ms_per_sample * batch, fetch_wait=costs.fetch_wait_ms_per_sample * batch,
        step=step, step_cpu=min(step_cpu, step),
        handover=costs.handover_ms_per_sample * batch if workers else 0.0, h2d=h2d_ms,
        ranks=ranks, step_threads=max(int(model.step_threads), 1))
    if workers == 0:
        return _predict_in_process(model, case)
    return _predict_with_workers(model, case, usable_cores or cores)


@dataclass(frozen=True)
class _Loader:
    """One config's DataLoader settings, and its epoch's length in batches (inf: no epoch starts)."""

    batch: int
    workers: int
    prefetch: int
    persistent: bool
    epoch: float


@dataclass(frozen=True)
class _Case:
    """One config on one rank: its settings, its working cores, and its costs per batch in ms
    before any crowding."""

    loader: _Loader
    cores: float
    fetch_cpu: float
    fetch_wait: float
    step: float
    step_cpu: float
    handover: float
    h2d: float
    ranks: int = 1  # ranks in step, sharing the machine (cores × ranks working cores)
    step_threads: int = 1  # threads the step's CPU phase runs on at once (its CPU work: step_cpu × these)


def _predict_in_process(model: PipelineModel, case: _Case) -> Prediction:
    """num_workers=0: the loop fetches each batch itself, then copies and steps."""
    fetch_cpu, fetch_wait, step = case.fetch_cpu, case.fetch_wait, case.step
    main_fetch = model.costs.main_fetch_ms_per_sample
    alone = main_fetch * case.loader.batch if main_fetch is not None else fetch_cpu + fetch_wait
    if case.cores < 1:
        # Less than a core of its own (ranks sharing fewer cores, a CPU quota): the training
        # process's CPU phases, its fetch's and its step's, take that much longer.
        share = fetch_cpu / (fetch_cpu + fetch_wait) if fetch_cpu + fetch_wait > 0 else 0.0
        alone += alone * share * (1 / case.cores - 1)
        step += case.step_cpu * (1 / case.cores - 1)
    sim = simulate(0, 0, False, alone, model.fitted.fetch_cv, 0.0, step + case.h2d, 0.0, case.loader.epoch,
                   case.ranks)
    period = max(sim.period_ms, MIN_PERIOD_MS)
    return Prediction(1e3 * case.loader.batch / period, min(1.0, (sim.wait_ms + case.h2d) / period), period, False,
                      step_ms=step)


def _predict_with_workers(model: PipelineModel, case: _Case, usable_cores: float) -> Prediction:
    """With workers: the queue simulated at the pace crowding sets (see _settle), capped by the
    cores."""
    # Each batch is also put into shared memory.
    case = replace(case, fetch_cpu=case.fetch_cpu + model.fitted.worker_put_ms)
    costs = model.costs
    start = costs.persistent_resume_ms if case.loader.persistent else \
        costs.worker_start_ms + costs.worker_start_per_worker_ms * starting(case.loader.workers, usable_cores)
    starts_ms = start / case.loader.epoch if math.isfinite(case.loader.epoch) else 0.0  # per batch

    def cap(wasted: float, spin: float = 1.0) -> float:
        # The cores cap it all: every batch's CPU (fetch, hand-over, the step's host part on each
        # of its threads, with what they spin while they wait for each other), and each epoch's
        # start, which nothing overlaps (the workers start, or resume, once the last epoch has
        # ended), spread over the epoch.
        step_cpu = case.step_cpu * case.step_threads * spin
        return (case.fetch_cpu * wasted + step_cpu + case.handover) / case.cores + starts_ms

    pace = _settle(model, case, start, cap)
    period, capped = pace.period, cap(pace.wasted, pace.step_spin)
    cpu_bound = pace.saturated or capped > period
    if pace.saturated:
        # Between two bounds: the cores' cap (never idle) and the crowding (runnable threads
        # counted as independent, which overshoots where they never block); the cap weighs in
        # with the share of the fetch that is CPU work (threads that wait in their fetch leave
        # the cores idle at times, so the crowding holds for them).
        fetch_cpu, fetch_wait = case.fetch_cpu, case.fetch_wait
        cpu_share = fetch_cpu / (fetch_cpu + fetch_wait) if fetch_cpu + fetch_wait > 0 else 1.0
        weight = SATURATED_CAP_WEIGHT * cpu_share
        period = weight * capped + (1 - weight) * max(period, capped)
    period = max(period, capped, MIN_PERIOD_MS)
    step_wall = case.step + (pace.step_stretch - 1) * case.step_cpu
    wait_ratio = max(0.0, 1 - step_wall / period)
    if case.ranks > 1:
        # Each rank's wait for its own batch and its copy; the rest of the period it waits for
        # the slowest rank, inside the step's collective.
        wait_ratio = min(wait_ratio, (pace.wait + case.h2d) / period)
    crowded = cpu_bound or pace.worker_stretch > CROWDED_STRETCH or pace.main_stretch > CROWDED_STRETCH or \
        pace.step_stretch > CROWDED_STRETCH
    hidden = not crowded and pace.fetch / case.loader.workers <= pace.main_wall
    return Prediction(1e3 * case.loader.batch / period, min(1.0, wait_ratio), period, crowded, hidden, step_wall)


@dataclass
class _Pace:
    """The pace with workers, as the crowding's fixed point settles (see _settle)."""

    worker_stretch: float = 1.0  # how much a worker's CPU phases stretch
    main_stretch: float = 1.0  # and the training thread's (receiving a batch)
    step_stretch: float = 1.0  # and the step's (on its threads; as main_stretch on one without step_sync)
    step_spin: float = 1.0  # the step's CPU per batch over its work: its threads spin while they wait
    period: float = 0.0  # per batch, simulated
    wasted: float = 1.0  # work per useful batch (more where fetched batches go unused)
    fetch: float = 0.0  # a fetch's wall time, stretched
    main_wall: float = 0.0  # the loop's own time per batch (step, copy, hand-over)
    wait: float = 0.0  # per batch, simulated: the ranks' mean wait for their own batch
    saturated: bool = False  # the cores are short even with no crowding


def _settle(model: PipelineModel, case: _Case, start: float, cap: Callable[[float], float]) -> _Pace:
    """Busy threads beyond the cores: each thread's CPU phases stretch by the crowding it meets
    (a fixed point, at most 4 rounds: the stretch slows the pace, which changes how busy each
    thread is), and each busy thread of a rank beyond its share of the cores costs
    `oversubscription` more CPU (switches, caches)."""
    pace = _Pace()
    workers, fetch_cpu, handover, threads = case.loader.workers, case.fetch_cpu, case.handover, case.step_threads
    kappa = model.fitted.oversubscription
    for attempt in range(4):
        fetch = case.fetch_wait + fetch_cpu * pace.worker_stretch
        main_cpu = case.step_cpu * pace.step_stretch + handover * pace.main_stretch
        main_wall = case.step - case.step_cpu + case.h2d + main_cpu
        sim = simulate(workers, max(case.loader.prefetch, 1), case.loader.persistent, fetch, model.fitted.fetch_cv,
                       handover * pace.main_stretch, main_wall - handover * pace.main_stretch, start, case.loader.epoch,
                       case.ranks)
        period = sim.period_ms
        useful = fetch / (workers * period) if period > 0 else 0.0  # the workers' share spent on kept batches
        pace.wasted = max(1.0, sim.worker_share / useful) if useful > 0 else 1.0
        pace.period, pace.fetch, pace.main_wall, pace.wait = period, fetch, main_wall, sim.wait_ms
        if attempt == 0:
            pace.saturated = cap(pace.wasted) >= period
        worker_busy = min(1.0, sim.worker_share * fetch_cpu * pace.worker_stretch / fetch) if fetch > 0 else 0.0
        main_busy = min(1.0, main_cpu / period) if period > 0 else 1.0
        ws, ms = contention(workers, worker_busy, main_busy, case.cores * case.ranks, case.ranks, threads)
        ss, spin = (ms, 1.0) if threads == 1 and model.fitted.step_sync == 0 else \
            step_stretch(workers, worker_busy, case.cores * case.ranks, case.ranks, threads, model.fitted.step_sync)
        # The cost of threads beyond the cores is fitted on one process tree: each rank pays it
        # for its own beyond its share (counted over the whole host, four ranks of six workers
        # on two cores would pay for 20 threads, far past any the fit saw: measured, the cpu
        # pipeline on 4 ranks ran with workers faster than without, as so counted it would not).
        excess = max(0.0, workers * worker_busy + main_busy * threads - case.cores)
        ws, ms, ss = ws * (1 + kappa * excess), ms * (1 + kappa * excess), ss * (1 + kappa * excess)
        pace.step_spin = spin
        if abs(ws - pace.worker_stretch) < 1e-3 and abs(ms - pace.main_stretch) < 1e-3 and \
                abs(ss - pace.step_stretch) < 1e-3:
            break
        pace.worker_stretch, pace.main_stretch, pace.step_stretch = ws, ms, ss
    return pace

