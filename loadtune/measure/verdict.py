"""What limits a trial, in one word and one sentence, from its timing and resource figures.

`verdict(Evidence)` returns one of VERDICTS and a sentence with the remedy. The order of the
checks is the order of precedence: memory risk (it can kill a run), compute-bound, start-up,
then what the steady-state wait is, decided by evidence from inside the trial rather than by
one utilisation threshold: how much of the wait the training thread spends receiving batches
(hand-over), whether the machine's cores are busy (the kernel's count), how much of each
fetch is CPU work, and how long the workers sit idle. Mixed evidence is said with its figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadtune.record.findings import ThreadsOversubscribed
from loadtune.record.measurement import Measurement

COMPUTE_BOUND = "compute-bound"
DATA_BOUND_CPU = "data-bound: cpu"
DATA_BOUND_IO = "data-bound: io/latency"
DATA_BOUND_START_UP = "data-bound: start-up"
DATA_BOUND_HANDOVER = "data-bound: hand-over"
DATA_BOUND_STARVED = "data-bound: starved workers"
MEMORY_RISK = "memory risk"
VERDICTS = (COMPUTE_BOUND, DATA_BOUND_CPU, DATA_BOUND_IO, DATA_BOUND_HANDOVER, DATA_BOUND_STARVED,
            DATA_BOUND_START_UP, MEMORY_RISK)

# Below this wait ratio the loader keeps up: what is left to gain is in the step itself.
COMPUTE_BOUND_WAIT_RATIO = 0.10
# At or above this utilisation of the usable cores, the CPU is saturated.
CPU_SATURATED_UTIL = 0.85
# Inside a fetch, CPU / wall at or above this: loading is CPU work; below, it waits (reads, sleeps).
FETCH_CPU_BOUND_SHARE = 0.5
# On saturated cores a CPU-bound fetch also waits for a core, so its share falls; a fetch that
# sleeps or reads stays far below this even then.
FETCH_CPU_CONTENDED_SHARE = 0.2
# At least this share of the loop's wait spent receiving batches (training-thread CPU inside
# next(), with workers): the hand-over is the bottleneck; at least the smaller share: a part of it.
# The CPU figure leaves out the time the thread sits blocked inside a rebuild (the file_descriptor
# strategy asks the worker for each tensor's descriptor over a socket): a loop that does nothing
# but receive 200-tensor batches shows 0.48-0.58 of its wait as CPU, so 0.4 is most of the wait.
HANDOVER_MAIN_SHARE = 0.4
HANDOVER_PART_SHARE = 0.25
# Workers idle (not fetching) at least this share of a window while the loop waits: starved of
# indices by the in-order, bounded prefetch protocol.
STARVED_IDLE_SHARE = 0.3
# Other processes using at least this share of the cores are worth naming.
OUTSIDE_NOTABLE = 0.1
# Above this share of the wait spent at epoch starts, start-up is what the wait is.
START_UP_WAIT_SHARE = 0.5
# Growth of one worker's memory within the window beyond this (plus the batches it may hold
# in flight) is the copy-on-read pattern: Python objects read in a worker are copied page
# by page as their reference counts are written (pytorch issue 13246).
MEMORY_RISK_GROWTH_MB = 50.0
# A DataLoader worker that runs no library thread pool has 3 threads: its main thread, the
# queue feeder, and the listener that passes shared-memory file descriptors. Only the main
# one computes.
BASE_WORKER_THREADS = 3
# Threads per worker beyond the base by less than this are transient helpers, not a pool.
EXTRA_THREADS_TOLERANCE = 0.5


@dataclass(frozen=True)
class Waits:
    """How long the loop waited per batch, and how much of it at epoch starts."""

    wait_ms: float  # mean wait per counted batch
    epoch_start_ms: float  # mean wait of an epoch's first batch; nan when no epoch started
    epoch_wait_share: float  # share of the total wait spent at epoch starts (see epoch_wait_share())


@dataclass(frozen=True)
class MemoryGrowth:
    """How the tree's memory grew within the window, and what batches in flight may hold."""

    worker_pss_growth_mb: float | None = None  # mean per worker within the window
    pss_growth_mb: float | None = None  # the whole tree; used per worker when the above is missing
    inflight_mb_per_worker: float = 0.0  # batches a worker may hold: shm_need_mb(...) / num_workers


@dataclass(frozen=True)
class InsideTrial:
    """From inside the trial (see diagnose.window_evidence); None where not read."""

    machine_busy: float | None = None  # every process on the machine, share of its cores (the kernel's)
    outside_cpu: float | None = None  # other processes' share of the usable cores
    fetch_cpu_share: float | None = None  # CPU / wall inside the loading processes' fetches
    worker_idle_share: float | None = None  # share of a window the mean worker spent not fetching
    handover_share: float | None = None  # share of the wait the training thread spent receiving batches


@dataclass(frozen=True)
class Settings:
    """The trial's loader settings the advice depends on."""

    persistent_workers: bool | None = None  # sharpens the start-up advice when known
    prefetch_factor: int | None = None
    in_order: bool = True


@dataclass(frozen=True)
class Evidence:
    """What a verdict is drawn from: one trial's figures (stats and summarize_resources)."""

    wait_ratio: float
    cpu_util: float  # the tree's CPU / wall / usable cores, over the counted window
    usable_cores: float
    num_workers: int  # per rank
    waits: Waits
    memory: MemoryGrowth = MemoryGrowth()
    threads_per_worker: float | None = None
    # How busy each loading process is, as a share of one core: the mean worker (or, without
    # workers, the main process). Near 1, loading is CPU work even when cores are left idle.
    loader_busy: float | None = None
    ranks: int = 1  # data-parallel ranks, each with num_workers workers of its own
    inside: InsideTrial = InsideTrial()
    settings: Settings = Settings()


def epoch_starts_per_batch(measurement: Measurement) -> float:
    """Epoch starts per counted batch over all windows of a measurement."""
    flags = [flag for w in measurement.windows for flag in w.epoch_start]
    return sum(flags) / len(flags) if flags else 0.0


def epoch_wait_share(wait_ms: float, epoch_start_ms: float, starts_per_batch: float) -> float:
    """Share of the wait spent at epoch starts: epoch_start_ms × starts_per_batch / wait_ms.

    With stats.summarize's wait_ms and epoch_start_ms and epoch_starts_per_batch() of the
    same measurement, this is exactly Σ wait at epoch starts / Σ wait. 0 when no epoch
    started or nothing was waited for; at most 1.
    """
    if not wait_ms > 0 or not starts_per_batch > 0 or math.isnan(epoch_start_ms):
        return 0.0
    return min(1.0, max(0.0, epoch_start_ms * starts_per_batch / wait_ms))


def _growth_per_worker(e: Evidence) -> float | None:
    if e.num_workers <= 0:
        return None  # no worker copies anything: growth in the main process is not this pattern
    if e.memory.worker_pss_growth_mb is not None:
        return e.memory.worker_pss_growth_mb
    if e.memory.pss_growth_mb is not None:
        return e.memory.pss_growth_mb / (e.num_workers * e.ranks)
    return None


def _cores(cores: float) -> str:
    return f"{cores:g} usable core{'' if cores == 1 else 's'}"


def verdict(e: Evidence) -> tuple[str, str]:
    """The verdict (one of VERDICTS) and one sentence of advice with the figures behind it."""
    waiting = f"waiting {e.wait_ratio:.0%} of the time"
    growth = _growth_per_worker(e)
    if growth is not None and growth > MEMORY_RISK_GROWTH_MB + e.memory.inflight_mb_per_worker:
        return MEMORY_RISK, (
            f"each of the {e.num_workers} workers grew by {growth:.0f} MB during the window "
            f"({growth * e.num_workers:.0f} MB in all, and it grows with the number of workers): Python "
            f"objects read in workers are copied page by page (pytorch issue 13246), so hold file lists "
            f"and labels in numpy arrays, pandas or pyarrow rather than Python lists and dicts."
        )
    if e.wait_ratio < COMPUTE_BOUND_WAIT_RATIO:
        return COMPUTE_BOUND, (
            f"{waiting}: the loader keeps up, so the model and its kernels are what to optimise now."
        )
    share = e.waits.epoch_wait_share
    if share > START_UP_WAIT_SHARE:
        start_ms = e.waits.epoch_start_ms
        each = f"{start_ms:.0f} ms each" if not math.isnan(start_ms) else "at each start"
        where = f"{share:.0%} of the wait is at epoch starts ({each})"
        if e.num_workers <= 0:
            return DATA_BOUND_START_UP, (
                f"{where}: the dataset's per-epoch setup (its __iter__ or sampler) is slow; do it once, "
                f"or use workers with persistent_workers=True so it overlaps the step."
            )
        if e.settings.persistent_workers:
            return DATA_BOUND_START_UP, (
                f"{where} even with persistent_workers=True: the first batch of an epoch waits for a "
                f"whole batch to be built, so use longer epochs or make the per-epoch setup cheaper."
            )
        return DATA_BOUND_START_UP, (
            f"{where}: set persistent_workers=True so the {e.num_workers} workers are not started "
            f"again every epoch (the queue still refills at each start; the persistent_workers trial "
            f"shows whether it pays here), or use longer epochs."
        )
    name, advice = _steady_state(e, waiting)
    handover = e.inside.handover_share or 0.0
    if name != DATA_BOUND_HANDOVER and e.num_workers > 0 and handover >= HANDOVER_PART_SHARE:
        kind = name.split(": ", 1)[-1]
        advice = (f"mostly {kind}, partly hand-over ({handover:.0%} of the wait is receiving batches from the "
                  f"workers): {advice}")
    return name, advice


def _outside(e: Evidence) -> str:
    if e.inside.outside_cpu is not None and e.inside.outside_cpu >= OUTSIDE_NOTABLE:
        return f" (other processes use {e.inside.outside_cpu:.0%} of them: a busy machine)"
    return ""


def _steady_state(e: Evidence, waiting: str) -> tuple[str, str]:
    """What the steady-state wait is, from the evidence of inside the trial."""
    inside = e.inside
    busy = inside.machine_busy if inside.machine_busy is not None else e.cpu_util
    handover = inside.handover_share or 0.0
    if e.num_workers > 0 and handover >= HANDOVER_MAIN_SHARE:
        return DATA_BOUND_HANDOVER, (
            f"{waiting}, {handover:.0%} of it receiving batches from the workers (the queue read and the "
            f"shared-memory rebuild of every tensor): pass fewer, larger tensors (one stacked tensor, not "
            f"lists of them), numpy arrays rather than Python objects, and smaller dtypes; more workers "
            f"will not help."
        )
    fetch_cpu = inside.fetch_cpu_share
    if busy >= CPU_SATURATED_UTIL and (fetch_cpu is None or fetch_cpu >= FETCH_CPU_CONTENDED_SHARE):
        return DATA_BOUND_CPU, (
            f"{waiting} while the {_cores(e.usable_cores)} are {busy:.0%} busy{_outside(e)}: more workers "
            f"will not help; make the transforms cheaper, give the job more cores, or move decoding "
            f"elsewhere (the accelerator, or once, offline)."
        )
    if e.num_workers > 0 and inside.worker_idle_share is not None and inside.worker_idle_share >= STARVED_IDLE_SHARE:
        deeper = max(4, 2 * (e.settings.prefetch_factor or 2))
        order = " or in_order=False (a slow batch then no longer holds back the ones behind it)" \
            if e.settings.in_order else ""
        return DATA_BOUND_STARVED, (
            f"{waiting} while the workers sit idle {inside.worker_idle_share:.0%} of the time, waiting for "
            f"indices: DataLoader asks each worker for at most prefetch_factor batches and takes them in "
            f"order, so try prefetch_factor={deeper}{order}."
        )
    return _loading(e, waiting, busy)


def _loading(e: Evidence, waiting: str, busy: float) -> tuple[str, str]:
    """CPU work or waiting on storage, from how much of each fetch is CPU work."""
    target = max(1, int(e.usable_cores / e.ranks))  # per rank: the ranks share the cores
    fetch_cpu_share = e.inside.fetch_cpu_share
    if fetch_cpu_share is not None:
        cpu_work = fetch_cpu_share >= FETCH_CPU_BOUND_SHARE
    else:  # no fetch counters: how busy each loading process is
        cpu_work = e.loader_busy is not None and e.loader_busy >= CPU_SATURATED_UTIL
    share = f"{fetch_cpu_share:.0%} of each fetch is CPU work" if fetch_cpu_share is not None else \
        f"each loading process is {e.loader_busy or 0:.0%} busy"
    if cpu_work:
        if e.num_workers <= 0:
            return DATA_BOUND_CPU, (
                f"{waiting}: loading runs in the training process and {share}, while the "
                f"{_cores(e.usable_cores)} are {busy:.0%} busy: use workers (num_workers={target}) so decoding "
                f"runs beside the step."
            )
        return DATA_BOUND_CPU, (
            f"{waiting}: {share} and the {_cores(e.usable_cores)} are {busy:.0%} busy: add workers up to "
            f"the cores (num_workers={max(target, e.num_workers + 1)}); beyond them, only cheaper "
            f"transforms or more cores help."
        )
    more = max(2, 2 * e.num_workers)
    now = "loading in the main process" if e.num_workers <= 0 else f"now {e.num_workers}"
    detail = f", and only {fetch_cpu_share:.0%} of each fetch is CPU work" if fetch_cpu_share is not None else ""
    return DATA_BOUND_IO, (
        f"{waiting} while the {_cores(e.usable_cores)} are only {busy:.0%} busy{detail}: the loader waits on "
        f"storage or latency, not CPU, so more workers ({now}; try num_workers={more}) help, and on "
        f"remote storage, concurrent reads."
    )


def suggestions(e: Evidence) -> list[dict[str, object]]:
    """The loader settings the verdict's advice names, as changes to measure on top of the
    trial (one dict per alternative); none where the advice is not a setting."""
    name, _ = verdict(e)
    busy = e.inside.machine_busy if e.inside.machine_busy is not None else e.cpu_util
    if name == DATA_BOUND_IO:
        return [{"num_workers": max(2, 2 * e.num_workers)}]
    if name == DATA_BOUND_STARVED:
        deeper: list[dict[str, object]] = [{"prefetch_factor": max(4, 2 * (e.settings.prefetch_factor or 2))}]
        return deeper + ([{"in_order": False}] if e.settings.in_order else [])
    if name == DATA_BOUND_START_UP and e.num_workers > 0 and not e.settings.persistent_workers:
        return [{"persistent_workers": True}]
    if name == DATA_BOUND_START_UP and e.num_workers <= 0:
        return [{"num_workers": max(1, int(e.usable_cores / e.ranks)), "persistent_workers": True}]
    if name == DATA_BOUND_CPU and busy < CPU_SATURATED_UTIL:
        target = max(1, int(e.usable_cores / e.ranks))
        return [{"num_workers": max(target, e.num_workers + 1)}]
    return []


def oversubscription_warning(num_workers: int, threads_per_worker: float | None, usable_cores: float,
                             trial: str = "") -> ThreadsOversubscribed | None:
    """A warning when the workers' computing threads outnumber the usable cores, else None.

    Computing threads per worker are its threads beyond BASE_WORKER_THREADS plus its main
    thread; a worker without a library thread pool has none extra and never warns here.
    """
    if num_workers <= 0 or threads_per_worker is None:
        return None
    extra = threads_per_worker - BASE_WORKER_THREADS
    if extra < EXTRA_THREADS_TOLERANCE:
        return None
    computing = 1 + extra
    total = num_workers * computing
    if total <= usable_cores:
        return None
    return ThreadsOversubscribed(trial, num_workers, computing, usable_cores)
