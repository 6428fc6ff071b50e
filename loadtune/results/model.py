"""The pipeline model (docs/model.md): what every DataLoader config of a sweep's space would do,
fitted to the evidence of the trials measured so far.

`fit` reads the costs each trial shows (fetch CPU and waiting, hand-over, step, copy, epoch
start-up, usable cores) over all measured trials together, then fits the figures no single
column shows by how well the whole model explains the measured throughputs.
`PipelineModel.predict` simulates the DataLoader's own protocol for any config (see simulate),
capped by what the cores can do. Settings the mechanism does not cover (the thread settings)
get a measured factor. A step that runs on several threads (torch's intra-op threads) crowds
with the workers as its threads wait for each other (step_sync). Offline (numpy only): the
readers use it without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from loadtune.results.record import Record
from loadtune.trials import IDEAL, effective_settings, format_value

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
# Batches simulated per epoch at most: enough for a steady state well past the prefetch queue;
# longer epochs add their start-up cost spread over their real length.
SIM_EPOCH_BATCHES = 120
SIM_EPOCHS = 3  # the first is dropped: it starts from nothing, as no measured window does
SIM_SEED = 20261203
# simulate() is a pure function of its arguments, and a fit asks for the same case again and again
# (each figure's search leaves the others' cases as they were): the latest results are kept.
SIM_CACHE = 8192
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
# A model fitted to fewer measured trials than this predicts nothing.
MIN_TRIALS_TO_FIT = 2
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
class Evidence:
    """One measured trial as the model reads it (a Record's evidence columns)."""

    settings: dict[str, Any]
    batch_size: int
    throughput: float
    wait_ratio: float | None
    step_ms: float | None
    h2d_ms: float
    fetch_ms: float | None
    fetch_cpu_share: float | None
    handover_ms: float | None
    main_cpu_util: float | None
    epoch_start_ms: float | None
    cores: float  # usable cores per rank
    ranks: int = 1

    @property
    def workers(self) -> int:
        return int(self.settings.get("num_workers") or 0)

    @property
    def period_ms(self) -> float:
        return 1e3 * self.batch_size / self.throughput


def evidence_of(record: Record) -> Evidence | None:
    """A measured record's evidence, or None when it did not run or lacks the figures."""
    if not record.ran or record.trial == IDEAL or record.data_flagged or not record.batch_size \
            or not record.throughput or record.throughput <= 0:
        return None
    if record.watched and record.dist_rank is not None and (record.ranks or 1) > 1:
        return None  # one rank's own figures: evidence once the ranks are combined (watched.combine_ranks)
    cores = float(record.cpu_count or 1)
    if record.cpu_quota:
        cores = min(cores, float(record.cpu_quota))
    # With ranks, each runs its own DataLoader on a share of the cores; throughput is their sum.
    ranks = max(int(record.ranks or 1), 1)
    settings = {k: getattr(record, k) for k in ("num_workers", "prefetch_factor", "persistent_workers",
                                                 "pin_memory", "batch_size", "main_threads", "worker_threads")}
    return Evidence(effective_settings(settings), int(record.batch_size), float(record.throughput) / ranks,
                    record.wait_ratio, record.step_ms, float(record.h2d_ms or 0.0), record.fetch_ms,
                    record.fetch_cpu_share, record.handover_ms, record.main_cpu_util, record.epoch_start_ms,
                    max(cores, 1.0) / ranks, ranks)


@dataclass(frozen=True)
class PipelineModel:
    """The fitted pipeline. Per-sample costs (a batch of B costs B times as much), in ms."""

    fetch_cpu_ms_per_sample: float  # CPU a loading process spends per sample (read, decode, augment, collate)
    fetch_wait_ms_per_sample: float  # the rest of a fetch: waiting on storage, the network, sleeps
    main_fetch_ms_per_sample: float | None  # a fetch in the training process itself (num_workers=0), as measured
    handover_ms_per_sample: float  # the training thread's CPU to receive a batch from a worker
    step_ms_per_sample: float  # the step's wall time, uncontended
    step_cpu_ms_per_sample: float  # the part of it that is host CPU (competes with the workers)
    h2d_ms: float  # copy to the device per batch (pinned or not: see h2d_pinned_ms)
    h2d_pinned_ms: float
    worker_start_ms: float  # an epoch's start without persistent workers: fixed part
    worker_start_per_worker_ms: float  # and per worker, on a core of its own (see _starting)
    persistent_resume_ms: float  # an epoch's start with persistent workers
    cores: float  # usable cores (affinity and quota) of each rank it was fitted on
    fetch_cv: float  # batch-to-batch variation of a fetch (fitted)
    oversubscription: float  # extra CPU per busy thread beyond the cores, as a share (fitted)
    worker_put_ms: float  # a worker's CPU per batch beyond its fetch: putting it into shared memory (fitted)
    core_share: float  # what each core beyond the first adds for CPU-bound threads (fitted; < 1 on shared cores)
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
    # A step on several threads: how much more its CPU phase stretches, per busy thread beyond the
    # cores, than its share of the cores says (its threads wait for each other at every parallel
    # op, and spin while they wait; fitted, 0 where the step runs on one thread).
    step_sync: float = 0.0

    # --- predicting --------------------------------------------------------------------------

    def epoch_length(self, batch_size: int, ranks: int | None = None) -> float:
        """Batches per epoch of the run for this batch size on each of `ranks` ranks (default: as
        fitted; a DistributedSampler gives each rank its share), inf when unknown: no epoch starts
        modelled. Epochs end at the dataset's end, as in training: a sweep's figures are the
        run's (loadtune.run_epochs), whatever its windows cut."""
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
        h2d = self.h2d_pinned_ms if s["pin_memory"] else self.h2d_ms
        extra = self.added_collective_ms(ranks) if collective_ms is None else collective_ms
        core = _predict(self, batch, workers, prefetch, bool(s["persistent_workers"]), h2d,
                        max(_rank_cores(self, machine, ranks), 0.05), step_scale, machine / ranks,
                        ranks=ranks, collective_ms=extra)
        factor = 1.0
        for key, value, f in self.factors:
            if format_value(s.get(key, kwargs.get(key))) == value:
                factor *= f
        throughput = core.throughput * factor * max(ranks, 1)
        return replace(core, throughput=throughput, period_ms=core.period_ms / factor)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["factors"] = [{"key": k, "value": v, "factor": f} for k, v, f in self.factors]
        return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}


# --- the simulation ------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _draws(count: int, cv: float) -> tuple[float, ...]:
    """Multipliers of a fetch's mean time, mean 1 and the given variation (log-normal): the same
    draws for every config, so configs differ by their settings, not their luck."""
    if cv <= 0:
        return (1.0,) * count
    sigma = math.sqrt(math.log1p(cv * cv))
    z = np.random.default_rng(SIM_SEED).standard_normal(count)
    return tuple(float(x) for x in np.exp(z * sigma - sigma * sigma / 2))


@dataclass(frozen=True)
class Simulated:
    period_ms: float  # per batch, epoch starts included and spread over the epoch
    wait_ms: float  # per batch: the loop's wait, receiving included
    worker_share: float  # share of the time the mean worker spends fetching (wasted batches too)


@lru_cache(maxsize=SIM_CACHE)
def simulate(workers: int, prefetch: int, persistent: bool, fetch_ms: float, cv: float, handover_ms: float,
             step_ms: float, start_ms: float, epoch_batches: float, ranks: int = 1) -> Simulated:
    """The DataLoader's protocol over whole epochs, in ms, on each of `ranks` ranks in step.

    Batch j of an epoch goes to worker j mod W; the first prefetch × W indices go out when the
    epoch's iterator is made, and each batch received sends out the index prefetch × W ahead
    (to the same worker). The loop takes batches in order: it waits for batch j's worker, takes
    `handover_ms` to receive it, then steps for `step_ms`. Without persistent workers each
    epoch's workers start `start_ms` after its iterator is made (with them, that is the resume).
    Ranks step together (DDP's all_reduce): each has its own workers and fetches (their own
    draws), and every rank's next step starts when the slowest rank's batch is in, so the pace is
    the expected maximum over the ranks. The wait is the ranks' mean.
    """
    n = int(min(epoch_batches, SIM_EPOCH_BATCHES)) if math.isfinite(epoch_batches) else SIM_EPOCH_BATCHES
    n = max(n, 1)
    ranks = max(ranks, 1)
    queue = _Queue(workers, prefetch, persistent, handover_ms, step_ms, start_ms, ranks)
    run = _Run(_draws((n + prefetch * workers) * SIM_EPOCHS * ranks, round(cv, 4)), fetch_ms)
    epoch_t: list[float] = []
    mid = (0.0, 0.0, 0.0)  # the last epoch's middle half: (its time, its batches, the ranks' mean wait in it)
    for e in range(SIM_EPOCHS):
        start = run.t
        if e == 1:
            run.busy = 0.0
        received = _epoch_with_workers(run, queue, n) if workers else _epoch_in_process(run, step_ms, n, ranks)
        epoch_t.append(run.t - start)
        if e == SIM_EPOCHS - 1 and n >= 8:
            lo, hi = n // 4, (3 * n) // 4
            first = (e * n + lo + 1) * ranks
            waits = run.waits[first:first + (hi - lo) * ranks]
            mid = (received[hi] - received[lo], float(hi - lo), sum(waits) / len(waits))
    kept = SIM_EPOCHS - 1
    total = sum(epoch_t[1:])
    share = run.busy / (workers * ranks * total) if workers and total > 0 else 0.0
    if not math.isfinite(epoch_batches) or epoch_batches > n:
        # A steady state from the middle of an epoch, and each epoch's extra cost spread over its
        # real length.
        steady = mid[0] / mid[1] if mid[1] else total / (kept * n)
        extra = max(0.0, total / kept - n * steady)
        per_epoch = extra / epoch_batches if math.isfinite(epoch_batches) else 0.0
        # The ranks' mean wait for their own batch (on one rank, the period less its step; on
        # more, the rest of the period waits for the slowest).
        wait = mid[2] if mid[1] else max(0.0, steady - step_ms)
        return Simulated(steady + per_epoch, wait + per_epoch, min(1.0, share))
    return Simulated(total / (kept * n), sum(run.waits[n * ranks:]) / (kept * n * ranks), min(1.0, share))


@dataclass(frozen=True)
class _Queue:
    """The simulated DataLoader's settings and the loop's fixed costs, in ms (see simulate)."""

    workers: int
    prefetch: int
    persistent: bool
    handover_ms: float
    step_ms: float
    start_ms: float
    ranks: int = 1


@dataclass
class _Run:
    """The simulation as it goes: the loop's clock, its waits, and the workers' busy time."""

    draws: tuple[float, ...]
    fetch_ms: float
    draw: int = 0
    t: float = 0.0  # the loop's clock: when it is free to ask for the next batch
    busy: float = 0.0
    waits: list[float] = field(default_factory=list)

    def fetch(self) -> float:
        """The next fetch's time, with its variation."""
        took = self.fetch_ms * self.draws[self.draw]
        self.draw += 1
        return took


def _epoch_in_process(run: _Run, step_ms: float, n: int, ranks: int = 1) -> list[float]:
    """An epoch of `n` batches fetched by the loop itself on each rank; when each was in on
    every rank."""
    received = [0.0] * n
    for j in range(n):
        took = [run.fetch() for _ in range(ranks)]
        run.waits.extend(took)
        received[j] = run.t + max(took)
        run.t += max(took) + step_ms
    return received


def _epoch_with_workers(run: _Run, queue: _Queue, n: int) -> list[float]:
    """An epoch of `n` batches from each rank's workers; when each was in on every rank."""
    if queue.ranks == 1:
        return _epoch_one_rank(run, queue, n)
    start, ranks = run.t, queue.ranks
    received = [[0.0] * n for _ in range(ranks)]
    free = [[start + queue.start_ms] * queue.workers for _ in range(ranks)]
    depth = queue.prefetch * queue.workers
    slowest = [0.0] * n
    for j in range(n):
        k = j % queue.workers
        latest = run.t
        for r in range(ranks):
            sent = start if j < depth else received[r][j - depth]
            took = run.fetch()
            run.busy += took
            done = max(sent, free[r][k]) + took
            free[r][k] = done
            got = max(done, run.t) + queue.handover_ms
            run.waits.append(got - run.t)
            received[r][j] = got
            latest = max(latest, got)
        slowest[j] = latest
        run.t = latest + queue.step_ms
    return slowest


def _epoch_one_rank(run: _Run, queue: _Queue, n: int) -> list[float]:
    """_epoch_with_workers on one rank, the same arithmetic in the same order (the same figures to
    the last bit), with the loop's state in locals: the fit simulates thousands of epochs."""
    start = t = run.t
    workers, handover, step = queue.workers, queue.handover_ms, queue.step_ms
    depth = queue.prefetch * workers
    free = [start + queue.start_ms] * workers
    received = [0.0] * n
    draws, draw, fetch_ms, busy = run.draws, run.draw, run.fetch_ms, run.busy
    waits = run.waits
    for j in range(n):
        k = j % workers
        sent = start if j < depth else received[j - depth]
        took = fetch_ms * draws[draw]
        draw += 1
        busy += took
        ready = free[k]
        done = (sent if sent > ready else ready) + took
        free[k] = done
        got = (done if done > t else t) + handover
        waits.append(got - t)
        received[j] = got
        t = got + step
    run.t, run.draw, run.busy = t, draw, busy
    return received


def _binomial(count: int, share: float) -> np.ndarray:
    """P(k of `count` independent threads are runnable), each runnable `share` of the time."""
    dist = np.zeros(count + 1)
    dist[0] = 1.0
    for _ in range(count):
        dist[1:] = dist[1:] * (1 - share) + dist[:-1] * share
        dist[0] *= 1 - share
    return dist


def _contention(workers: int, worker_busy: float, main_busy: float, cores: float,
                ranks: int = 1, step_threads: int = 1) -> tuple[float, float]:
    """How much a worker's and the training thread's CPU phases stretch: the expected
    max(1, runnable threads / cores) each sees while it runs, on the `cores` that `ranks` ranks
    share, each rank with `workers` workers. Workers are runnable independently, each
    `worker_busy` of the time; the ranks' training processes `main_busy` of the time, all at once
    (ranks step together, so their own CPU phases, receiving a batch and the step's host part,
    fall together), each on `step_threads` threads then (the step's; see _step_stretch)."""

    def stretch(runnable: np.ndarray) -> np.ndarray:
        return np.maximum(1.0, runnable / cores)

    # A training thread sees every rank's workers and the other training threads; a running
    # worker sees the other workers and, `main_busy` of the time, every training thread.
    node_workers = workers * ranks
    main = float(np.sum(_binomial(node_workers, worker_busy) * stretch(np.arange(node_workers + 1) + ranks)))
    if not workers:
        return 1.0, main
    alongside = np.arange(node_workers) + 1.0  # itself and k others
    others = _binomial(node_workers - 1, worker_busy)
    training = ranks * max(step_threads, 1)
    worker = float(np.sum(others * (main_busy * stretch(alongside + training) + (1 - main_busy) * stretch(alongside))))
    return worker, main


def _step_stretch(workers: int, worker_busy: float, cores: float, ranks: int = 1, step_threads: int = 1,
                  sync: float = 0.0) -> tuple[float, float]:
    """How much the step's CPU phase stretches beside the workers, and its CPU over its work. The
    stretch: the expected max(1, runnable threads / cores) over the workers runnable beside the
    step's T threads of every rank (on one thread, the training thread's, see _contention), plus
    `sync` for each runnable thread beyond the cores: a step on several threads goes at its
    slowest thread's pace (every parallel op waits for all of them), so a worker that takes one
    of its cores holds the others back. Its CPU: its threads hold their share of the cores for
    the stretched time, spinning while they wait for each other (the workers do not get those
    cores). Measured on 2 cores, a CNN's SGD step on 2 threads: 8.5 ms alone; beside a
    thread that spins half the time 13 ms, beside one that never stops 44 ms (its share of the
    cores says 12.8), two 78 ms (share: 17), three 121 ms (share: 21): about 3.7 more per thread
    beyond the cores where they never stop, about 0.6 where they stop half the time (the step
    then runs in their gaps)."""
    node_workers = workers * ranks
    training = ranks * max(step_threads, 1)
    runnable = np.arange(node_workers + 1) + float(training)
    beyond = np.maximum(0.0, runnable - cores)
    odds = _binomial(node_workers, worker_busy)
    stretch = np.maximum(1.0, runnable / cores) + sync * beyond
    # With k workers runnable, each of the step's threads holds min(1, cores / runnable) of a core
    # for the stretched time: its share's worth is its work, the rest it spins.
    held = stretch * np.minimum(1.0, cores / runnable)
    return float(np.sum(odds * stretch)), float(np.sum(odds * held))


def _rank_cores(model: PipelineModel, machine_cores: float, ranks: int) -> float:
    """What each of `ranks` ranks gets of a machine's usable cores, in cores that work like the
    first: each core beyond the first adds `core_share`, a figure of the machine (cores that share
    a physical core, caches, memory bandwidth), so ranks share the working cores between them.
    Measured (benchmarks/transfer.py): two ranks decoding JPEGs without workers took 24% longer a
    fetch than one rank did; a fetch that spins until its own thread time has passed took no
    longer, as hyperthreads do not show in a thread's time."""
    working = 1 + (machine_cores - 1) * model.core_share if machine_cores > 1 else machine_cores
    return working / max(ranks, 1)


def _starting(workers: int, cores: float) -> float:
    """Worker start-ups an epoch's start waits for, one after another: W workers start at once on
    min(W, cores) of the rank's usable cores (starting a worker is CPU work)."""
    return workers / max(min(workers, cores), 0.05)


def _predict(model: PipelineModel, batch: int, workers: int, prefetch: int, persistent: bool, h2d_ms: float,
             cores: float, step_scale: float = 1.0, usable_cores: float | None = None, ranks: int | None = None,
             collective_ms: float = 0.0) -> Prediction:
    """One rank's prediction on `cores` working cores (its share of the machine's, see
    _rank_cores), with `ranks` ranks (default: as fitted) in step sharing the machine; its usable
    cores (default: `cores`) set how many workers start at once. `collective_ms` is added to each
    step (waiting, not CPU)."""
    ranks = model.ranks if ranks is None else ranks
    step_cpu = model.step_cpu_ms_per_sample * batch * step_scale
    step = max(model.step_ms_per_sample * batch * step_scale + collective_ms, step_cpu, 0.0)
    case = _Case(
        batch=batch, workers=workers, prefetch=prefetch, persistent=persistent, cores=cores,
        fetch_cpu=model.fetch_cpu_ms_per_sample * batch, fetch_wait=model.fetch_wait_ms_per_sample * batch,
        step=step, step_cpu=min(step_cpu, step),
        handover=model.handover_ms_per_sample * batch if workers else 0.0, h2d=h2d_ms,
        epoch=model.epoch_length(batch, ranks), ranks=ranks, step_threads=max(int(model.step_threads), 1))
    if workers == 0:
        return _predict_in_process(model, case)
    return _predict_with_workers(model, case, usable_cores or cores)


@dataclass(frozen=True)
class _Case:
    """One config on one rank: its settings, its working cores, and its costs per batch in ms
    before any crowding."""

    batch: int
    workers: int
    prefetch: int
    persistent: bool
    cores: float
    fetch_cpu: float
    fetch_wait: float
    step: float
    step_cpu: float
    handover: float
    h2d: float
    epoch: float  # batches per epoch (inf: no epoch starts)
    ranks: int = 1  # ranks in step, sharing the machine (cores × ranks working cores)
    step_threads: int = 1  # threads the step's CPU phase runs on at once (its CPU work: step_cpu × these)


def _predict_in_process(model: PipelineModel, case: _Case) -> Prediction:
    """num_workers=0: the loop fetches each batch itself, then copies and steps."""
    fetch_cpu, fetch_wait, step = case.fetch_cpu, case.fetch_wait, case.step
    alone = model.main_fetch_ms_per_sample * case.batch if model.main_fetch_ms_per_sample is not None \
        else fetch_cpu + fetch_wait
    if case.cores < 1:
        # Less than a core of its own (ranks sharing fewer cores, a CPU quota): the training
        # process's CPU phases, its fetch's and its step's, take that much longer.
        share = fetch_cpu / (fetch_cpu + fetch_wait) if fetch_cpu + fetch_wait > 0 else 0.0
        alone += alone * share * (1 / case.cores - 1)
        step += case.step_cpu * (1 / case.cores - 1)
    sim = simulate(0, 0, False, alone, model.fetch_cv, 0.0, step + case.h2d, 0.0, case.epoch, case.ranks)
    period = max(sim.period_ms, MIN_PERIOD_MS)
    return Prediction(1e3 * case.batch / period, min(1.0, (sim.wait_ms + case.h2d) / period), period, False,
                      step_ms=step)


def _predict_with_workers(model: PipelineModel, case: _Case, usable_cores: float) -> Prediction:
    """With workers: the queue simulated at the pace crowding sets (see _settle), capped by the
    cores."""
    case = replace(case, fetch_cpu=case.fetch_cpu + model.worker_put_ms)  # each batch is also put into shared memory
    start = model.persistent_resume_ms if case.persistent else \
        model.worker_start_ms + model.worker_start_per_worker_ms * _starting(case.workers, usable_cores)
    starts_ms = start / case.epoch if math.isfinite(case.epoch) else 0.0  # per batch

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
    hidden = not crowded and pace.fetch / case.workers <= pace.main_wall
    return Prediction(1e3 * case.batch / period, min(1.0, wait_ratio), period, crowded, hidden, step_wall)


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
    workers, fetch_cpu, handover, kappa = case.workers, case.fetch_cpu, case.handover, model.oversubscription
    threads = case.step_threads
    for attempt in range(4):
        fetch = case.fetch_wait + fetch_cpu * pace.worker_stretch
        main_cpu = case.step_cpu * pace.step_stretch + handover * pace.main_stretch
        main_wall = case.step - case.step_cpu + case.h2d + main_cpu
        sim = simulate(workers, max(case.prefetch, 1), case.persistent, fetch, model.fetch_cv,
                       handover * pace.main_stretch, main_wall - handover * pace.main_stretch, start, case.epoch,
                       case.ranks)
        period = sim.period_ms
        useful = fetch / (workers * period) if period > 0 else 0.0  # the workers' share spent on kept batches
        pace.wasted = max(1.0, sim.worker_share / useful) if useful > 0 else 1.0
        pace.period, pace.fetch, pace.main_wall, pace.wait = period, fetch, main_wall, sim.wait_ms
        if attempt == 0:
            pace.saturated = cap(pace.wasted) >= period
        worker_busy = min(1.0, sim.worker_share * fetch_cpu * pace.worker_stretch / fetch) if fetch > 0 else 0.0
        main_busy = min(1.0, main_cpu / period) if period > 0 else 1.0
        ws, ms = _contention(workers, worker_busy, main_busy, case.cores * case.ranks, case.ranks, threads)
        ss, spin = (ms, 1.0) if threads == 1 and model.step_sync == 0 else \
            _step_stretch(workers, worker_busy, case.cores * case.ranks, case.ranks, threads, model.step_sync)
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


# --- fitting -------------------------------------------------------------------------------


def _median(values: Iterable[float | None], default: float = 0.0) -> float:
    present = [float(v) for v in values if v is not None and math.isfinite(v)]
    return statistics.median(present) if present else default


def _uncontended(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Trials whose loading processes had a core each beside the training thread: their fetch
    wall time is the fetch's own, not time spent queued for a core."""
    calm = [e for e in evidence if e.workers == 0 or e.workers <= max(1, math.floor(e.cores) - 1)]
    return calm or [min(evidence, key=lambda e: e.workers)]


def _first_fetch_ms(fetch_cpu: float, fetch_wait: float, workers: int, cores: float) -> float:
    """The first batch of an epoch, with every worker fetching its first at once on the cores."""
    return fetch_wait + fetch_cpu * max(1.0, workers / cores)


def base_figures(evidence: Sequence[Evidence], dataset_len: int | None) -> PipelineModel:
    """The figures each trial shows directly, combined over the trials (medians: one odd process
    moves none of them); the figures in FITTED_GRIDS are left neutral for `fit` to search."""
    fetch_cpu, fetch_wait = _fetch_figures(evidence)
    handover = _handover_figure(evidence)
    threads = _step_threads(evidence, handover)
    step = _step_figure(evidence, threads)
    # The step's CPU on each of its threads; a step on several threads spins while crowded (its
    # CPU grows with its wall time), so that is read where nothing crowds it.
    shown = evidence if threads == 1 else _alone(evidence)
    step_cpu = _median(cpu / (e.batch_size * threads) for e in shown if (cpu := _step_cpu_ms(e, handover)) is not None)
    step_cpu = min(max(step_cpu, 0.0), step)
    pinned = [e.h2d_ms for e in evidence if e.settings["pin_memory"]]
    plain = [e.h2d_ms for e in evidence if not e.settings["pin_memory"]]
    h2d = _median(plain, _median(pinned))
    h2d_pinned = _median(pinned, h2d)
    start0, start_per, resume = _start_figures(evidence, fetch_cpu, fetch_wait)
    alone = [e.fetch_ms / e.batch_size for e in evidence if e.fetch_ms is not None and e.workers == 0]
    return PipelineModel(
        fetch_cpu_ms_per_sample=fetch_cpu, fetch_wait_ms_per_sample=fetch_wait,
        main_fetch_ms_per_sample=_median(alone) if alone else None, handover_ms_per_sample=handover,
        step_ms_per_sample=step, step_cpu_ms_per_sample=step_cpu, h2d_ms=h2d, h2d_pinned_ms=h2d_pinned,
        worker_start_ms=start0, worker_start_per_worker_ms=start_per, persistent_resume_ms=resume,
        cores=evidence[0].cores, fetch_cv=0.0, oversubscription=0.0, worker_put_ms=0.0, core_share=1.0,
        dataset_len=dataset_len, ranks=evidence[0].ranks, trials=len(evidence), step_threads=threads)


def _alone(evidence: Sequence[Evidence]) -> list[Evidence]:
    """The trials whose step had the cores to itself: without workers (else those with the fewest)."""
    fewest = min(e.workers for e in evidence)
    return [e for e in evidence if e.workers == fewest]


def _step_threads(evidence: Sequence[Evidence], handover_ms_per_sample: float) -> int:
    """Threads the step's CPU runs on at once: its CPU over its wall time where nothing crowds
    it (the trials without workers; with workers, a step's threads wait for the cores and its
    CPU over its wall time falls), rounded, between 1 and the cores. A step on a busy machine
    reads fewer: its threads then wait for the cores there too. One thread where the trials with
    workers show the step as mostly not CPU work: without workers the training process's CPU
    beyond its fetch's own thread was then the fetch's (torch ops on several threads). Where
    every trial set the training process's threads (main_threads) alike, those."""
    cores = max(1, math.floor(min(e.cores for e in evidence)))
    set_to = {e.settings.get("main_threads") for e in evidence}
    if len(set_to) == 1 and (threads := next(iter(set_to))) is not None:
        return int(min(max(int(threads), 1), cores))

    def ratios(with_workers: bool) -> list[float]:
        return [cpu / e.step_ms for e in evidence if bool(e.workers) == with_workers and e.step_ms
                and e.step_ms > 0 and (cpu := _step_cpu_ms(e, handover_ms_per_sample)) is not None]

    alone, beside = ratios(False), ratios(True)
    if not alone or (beside and statistics.median(beside) < 0.5):
        return 1
    return int(min(max(round(statistics.median(alone)), 1), cores))


def _step_figure(evidence: Sequence[Evidence], threads: int = 1) -> float:
    """The step's wall time per sample, uncontended. On ranks a step as timed holds its collective
    and the wait for the slowest rank's batch (the simulation adds that wait): the trial that
    waited least shows the step and its collective alone, where the workers had every rank's
    batch ready (one rank: the median of the uncontended trials; for a step on several threads,
    those without workers: any worker beside it crowds its threads)."""
    timed = [e for e in evidence if e.step_ms is not None] or list(evidence)
    if timed[0].ranks > 1:
        ready = [e for e in timed if e.workers] or timed
        return min((e.step_ms / e.batch_size for e in ready if e.step_ms is not None), default=0.0)
    calm = _alone(timed) if threads > 1 else _uncontended(timed)
    return _median((e.step_ms / e.batch_size for e in calm if e.step_ms is not None), 0.0)


def _fetch_figures(evidence: Sequence[Evidence]) -> tuple[float, float]:
    """A fetch's CPU and its waiting, in ms per sample: the workers' fetches where there are any
    (the training process may fetch differently: its torch ops use several threads; a worker's
    use one), its waiting from the uncontended trials; without a timed fetch, the loop's own
    wait without workers is the fetch."""
    timed = [e for e in evidence if e.fetch_ms is not None]
    with_fetch = [e for e in timed if e.workers] or timed
    calm = _uncontended(with_fetch) if with_fetch else []
    fetch_cpu = _median(e.fetch_ms * (e.fetch_cpu_share or 0.0) / e.batch_size
                        for e in with_fetch if e.fetch_ms is not None)
    fetch_wait = _median(e.fetch_ms * (1 - (e.fetch_cpu_share or 0.0)) / e.batch_size
                         for e in calm if e.fetch_ms is not None)
    if not with_fetch:
        fetch_wait = _median((e.period_ms * e.wait_ratio / e.batch_size for e in evidence
                              if e.workers == 0 and e.wait_ratio is not None), 0.0)
    return fetch_cpu, fetch_wait


def _handover_figure(evidence: Sequence[Evidence]) -> float:
    """The training thread's CPU per sample to receive a batch from a worker. Without persistent
    workers its CPU in next() also holds each epoch's worker start-up: the persistent trials
    show the hand-over alone, else the lowest."""
    handovers = [(e.handover_ms / e.batch_size, bool(e.settings["persistent_workers"])) for e in evidence
                 if e.workers > 0 and e.handover_ms is not None]
    kept = [ms for ms, persistent in handovers if persistent]
    return _median(kept) if kept else min((ms for ms, _ in handovers), default=0.0)


def _start_figures(evidence: Sequence[Evidence], fetch_cpu: float, fetch_wait: float) -> tuple[float, float, float]:
    """An epoch's start without persistent workers (fixed part, and per worker started in
    turn: see _starting), and with them (the resume), in ms: each epoch's wait for its first
    batch less that batch's own fetch."""
    starts = [(e, e.epoch_start_ms) for e in evidence if e.workers > 0 and e.epoch_start_ms is not None]

    def start_up(e: Evidence, waited_ms: float) -> float:
        first = _first_fetch_ms(fetch_cpu * e.batch_size, fetch_wait * e.batch_size, e.workers, e.cores)
        return waited_ms - first

    start0, start_per = _line([(_starting(e.workers, e.cores), start_up(e, ms)) for e, ms in starts
                               if not e.settings["persistent_workers"]])
    resume = max(0.0, _median((start_up(e, ms) for e, ms in starts if e.settings["persistent_workers"]), 0.0))
    return start0, start_per, resume


def _step_cpu_ms(e: Evidence, handover_ms_per_sample: float) -> float | None:
    """The step's host CPU per batch: the training process's CPU per batch less what it spent
    receiving batches (with workers) or fetching them (without)."""
    if e.main_cpu_util is None:
        return None
    main_ms = e.main_cpu_util * e.cores * e.period_ms
    if e.workers == 0:
        if e.fetch_ms is None or e.fetch_cpu_share is None:
            return None
        return main_ms - e.fetch_ms * e.fetch_cpu_share
    return main_ms - (e.handover_ms if e.handover_ms is not None else handover_ms_per_sample * e.batch_size)


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares intercept and slope (both kept at 0 or above); one x: its median, slope 0."""
    if not points:
        return 0.0, 0.0
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    if len(set(xs.tolist())) < 2:
        return max(0.0, float(np.median(ys))), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    slope = max(0.0, float(slope))
    if intercept < 0:
        intercept = 0.0
        slope = max(0.0, float(np.sum(xs * ys) / np.sum(xs * xs)))
    return float(intercept), slope


def _core_prediction(model: PipelineModel, e: Evidence) -> Prediction:
    """The mechanism's prediction for a measured trial, without the factors."""
    s = e.settings
    h2d = model.h2d_pinned_ms if s["pin_memory"] else model.h2d_ms
    return _predict(model, e.batch_size, e.workers, int(s["prefetch_factor"] or 0), bool(s["persistent_workers"]),
                    h2d, _rank_cores(model, model.cores * model.ranks, model.ranks), 1.0, model.cores)


def _explained(e: Evidence, baseline: Mapping[str, Any]) -> bool:
    """Whether the mechanism alone should explain this trial: it changes no unexplained setting."""
    return all(e.settings.get(k) == baseline.get(k) for k in e.settings if k not in MECHANISM_KEYS)


def run_epoch_samples(records: Sequence[Record]) -> int | None:
    """Samples in one of the training run's epochs (per rank): from the epoch the records' figures
    weigh starts by (run_epoch_batches, in batches of each record's size), else the dataset's
    length (files written before that column)."""
    weighed = [r.run_epoch_batches * r.batch_size for r in records if r.run_epoch_batches and r.batch_size]
    if weighed:
        return int(statistics.median(weighed))
    return next((r.dataset_len for r in records if r.dataset_len), None)


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
    # The fitted figures from the trials the mechanism alone should explain.
    model = _fitted(model, _search(model, [e for e in evidence if _explained(e, base)] or evidence))
    model = replace(model, factors=_factors(model, evidence, base))
    residuals = [math.log(e.throughput * model.ranks / model.predict(e.settings).throughput) for e in evidence]
    spread = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if residuals else 0.0
    return replace(model, residual_log_sd=spread)


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
    # Each is a float field; mypy checks the mapping's values against every field of the model.
    return replace(model, **figures)  # type: ignore[arg-type]


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
    fetch = model.fetch_cpu_ms_per_sample + model.fetch_wait_ms_per_sample
    share = model.fetch_cpu_ms_per_sample / fetch if fetch > 0 else 0.0
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
    if not any(e.handover_ms is not None for e in workers):
        out.append(("handover_ms_per_sample", RUN_WITH_WORKERS))
    epochs = model.dataset_len is not None
    restarting = [e for e in workers if not e.settings["persistent_workers"] and e.epoch_start_ms is not None]
    asked_restarting = {int(c["num_workers"]) for c in with_workers if not c["persistent_workers"]}
    if epochs and asked_restarting and not restarting:
        out += [("worker_start_ms", RUN_RESTARTING_WORKERS), ("worker_start_per_worker_ms", RUN_RESTARTING_WORKERS)]
    elif epochs and len({_starting(e.workers, e.cores) for e in restarting}) == 1 and \
            asked_restarting - {e.workers for e in restarting}:
        out.append(("worker_start_per_worker_ms", RUN_OTHER_WORKER_COUNT))
    if epochs and any(c["persistent_workers"] for c in with_workers) and \
            not any(e.settings["persistent_workers"] and e.epoch_start_ms is not None for e in workers):
        out.append(("persistent_resume_ms", RUN_PERSISTENT_WORKERS))
    if not _can_show("worker_put_ms", model, evidence):
        out.append(("worker_put_ms", RUN_WITH_WORKERS))
    if model.step_threads > 1 and not _can_show("step_sync", model, evidence):
        out.append(("step_sync", RUN_WITH_WORKERS))
    fetch = model.fetch_cpu_ms_per_sample + model.fetch_wait_ms_per_sample
    share = model.fetch_cpu_ms_per_sample / fetch if fetch > 0 else 0.0
    if not _can_show("core_share", model, evidence) and \
            any(int(c["num_workers"]) * share + 1 > model.cores for c in with_workers):
        out += [("core_share", RUN_CROWDED), ("oversubscription", RUN_CROWDED)]
    if model.h2d_ms > 0 and any(c["pin_memory"] for c in asked) and not any(e.settings["pin_memory"] for e in evidence):
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


def prediction_error(records: Sequence[Record]) -> tuple[float | None, int]:
    """Median |predicted/measured - 1| over the measured records that carry a prediction made
    before they ran, and how many there were."""
    errors = [abs(r.predicted_throughput / r.throughput - 1) for r in records
              if r.ran and r.trial != IDEAL and r.predicted_throughput and r.throughput]
    return (statistics.median(errors) if errors else None), len(errors)
