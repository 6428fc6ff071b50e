"""What limits a trial, in one word and one sentence, from its timing and resource figures.

`verdict(Evidence)` returns one of VERDICTS and a sentence with the remedy. The order of the
checks is the order of precedence: memory risk (it can kill a run), compute-bound, start-up,
then CPU versus I/O for the steady-state wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadtune.measurement import Measurement

COMPUTE_BOUND = "compute-bound"
DATA_BOUND_CPU = "data-bound: cpu"
DATA_BOUND_IO = "data-bound: io/latency"
DATA_BOUND_START_UP = "data-bound: start-up"
MEMORY_RISK = "memory risk"
VERDICTS = (COMPUTE_BOUND, DATA_BOUND_CPU, DATA_BOUND_IO, DATA_BOUND_START_UP, MEMORY_RISK)

# Below this wait ratio the loader keeps up: what is left to gain is in the step itself.
COMPUTE_BOUND_WAIT_RATIO = 0.10
# At or above this utilisation of the usable cores, the CPU is saturated.
CPU_SATURATED_UTIL = 0.85
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
class Evidence:
    """What a verdict is drawn from: one trial's figures (stats and summarize_resources)."""

    wait_ratio: float
    cpu_util: float  # the tree's CPU / wall / usable cores, over the counted window
    usable_cores: float
    num_workers: int  # per rank
    wait_ms: float  # mean wait per counted batch
    epoch_start_ms: float  # mean wait of an epoch's first batch; nan when no epoch started
    epoch_wait_share: float  # share of the total wait spent at epoch starts (see epoch_wait_share())
    worker_pss_growth_mb: float | None = None  # mean per worker within the window
    pss_growth_mb: float | None = None  # the whole tree; used per worker when the above is missing
    threads_per_worker: float | None = None
    persistent_workers: bool | None = None  # sharpens the start-up advice when known
    inflight_mb_per_worker: float = 0.0  # batches a worker may hold: shm_need_mb(...) / num_workers
    # How busy each loading process is, as a share of one core: the mean worker (or, without
    # workers, the main process). Near 1, loading is CPU work even when cores are left idle.
    loader_busy: float | None = None
    ranks: int = 1  # data-parallel ranks, each with num_workers workers of its own


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
    if e.worker_pss_growth_mb is not None:
        return e.worker_pss_growth_mb
    if e.pss_growth_mb is not None:
        return e.pss_growth_mb / (e.num_workers * e.ranks)
    return None


def _cores(cores: float) -> str:
    return f"{cores:g} usable core{'' if cores == 1 else 's'}"


def verdict(e: Evidence) -> tuple[str, str]:
    """The verdict (one of VERDICTS) and one sentence of advice with the figures behind it."""
    waiting = f"waiting {e.wait_ratio:.0%} of the time"
    growth = _growth_per_worker(e)
    if growth is not None and growth > MEMORY_RISK_GROWTH_MB + e.inflight_mb_per_worker:
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
    share = e.epoch_wait_share
    if share > START_UP_WAIT_SHARE:
        each = f"{e.epoch_start_ms:.0f} ms each" if not math.isnan(e.epoch_start_ms) else "at each start"
        where = f"{share:.0%} of the wait is at epoch starts ({each})"
        if e.num_workers <= 0:
            return DATA_BOUND_START_UP, (
                f"{where}: the dataset's per-epoch setup (its __iter__ or sampler) is slow; do it once, "
                f"or use workers with persistent_workers=True so it overlaps the step."
            )
        if e.persistent_workers:
            return DATA_BOUND_START_UP, (
                f"{where} even with persistent_workers=True: the first batch of an epoch waits for a "
                f"whole batch to be built, so use longer epochs or make the per-epoch setup cheaper."
            )
        return DATA_BOUND_START_UP, (
            f"{where}: set persistent_workers=True so the {e.num_workers} workers are not started "
            f"again every epoch (the queue still refills at each start; the persistent_workers trial "
            f"shows whether it pays here), or use longer epochs."
        )
    if e.cpu_util < CPU_SATURATED_UTIL and e.loader_busy is not None and e.loader_busy >= CPU_SATURATED_UTIL:
        target = max(1, int(e.usable_cores / e.ranks))  # per rank: the ranks share the cores
        if e.num_workers <= 0:
            return DATA_BOUND_CPU, (
                f"{waiting}: loading runs in the training process, which is {e.loader_busy:.0%} busy, while "
                f"the {_cores(e.usable_cores)} are {e.cpu_util:.0%} busy: use workers (num_workers={target}) "
                f"so decoding runs beside the step."
            )
        who = "the one worker is" if e.num_workers == 1 else f"each of the {e.num_workers} workers is"
        return DATA_BOUND_CPU, (
            f"{waiting}: {who} {e.loader_busy:.0%} busy decoding while the "
            f"{_cores(e.usable_cores)} are {e.cpu_util:.0%} busy: add workers up to the cores "
            f"(num_workers={target}); beyond them, only cheaper transforms or more cores help."
        )
    if e.cpu_util >= CPU_SATURATED_UTIL:
        return DATA_BOUND_CPU, (
            f"{waiting} while the {_cores(e.usable_cores)} are {e.cpu_util:.0%} busy: more workers "
            f"will not help; make the transforms cheaper, give the job more cores, or move decoding "
            f"elsewhere (the accelerator, or once, offline)."
        )
    more = max(2, 2 * e.num_workers)
    now = "loading in the main process" if e.num_workers <= 0 else f"now {e.num_workers}"
    return DATA_BOUND_IO, (
        f"{waiting} while the {_cores(e.usable_cores)} are only {e.cpu_util:.0%} busy: the loader "
        f"waits on storage or latency, not CPU, so more workers ({now}; try num_workers={more}) or a "
        f"larger prefetch_factor help, and on remote storage, concurrent reads."
    )


def oversubscription_warning(num_workers: int, threads_per_worker: float | None, usable_cores: float) -> str | None:
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
    return (
        f"{num_workers} workers × {computing:.0f} computing threads = {total:.0f} threads on "
        f"{_cores(usable_cores)}: OpenMP/MKL/OpenCV thread pools inside the workers compete for the "
        f"cores; export OMP_NUM_THREADS=1 before the run (or call threadpoolctl.threadpool_limits(1) "
        f"in worker_init_fn) and call cv2.setNumThreads(0) in worker_init_fn."
    )
