"""The DataLoader's protocol simulated over whole epochs (docs/model.md): when each batch is in,
how long the loop waits for it, and how busy the workers are, for one config's costs in ms."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

# Batches simulated per epoch at most: enough for a steady state well past the prefetch queue;
# longer epochs add their start-up cost spread over their real length.
SIM_EPOCH_BATCHES = 120
SIM_EPOCHS = 3  # the first is dropped: it starts from nothing, as no measured window does
SIM_SEED = 20261203
# simulate() is a pure function of its arguments, and a fit asks for the same case again and again
# (each figure's search leaves the others' cases as they were): the latest results are kept.
SIM_CACHE = 8192


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

