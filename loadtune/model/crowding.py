"""Crowded cores: how much the loading processes' and the step's CPU phases stretch when more
threads are runnable than there are cores (docs/model.md)."""

from __future__ import annotations

import numpy as np


def _binomial(count: int, share: float) -> np.ndarray:
    """P(k of `count` independent threads are runnable), each runnable `share` of the time."""
    dist = np.zeros(count + 1)
    dist[0] = 1.0
    for _ in range(count):
        dist[1:] = dist[1:] * (1 - share) + dist[:-1] * share
        dist[0] *= 1 - share
    return dist


def contention(workers: int, worker_busy: float, main_busy: float, cores: float,
                ranks: int = 1, step_threads: int = 1) -> tuple[float, float]:
    """How much a worker's and the training thread's CPU phases stretch: the expected
    max(1, runnable threads / cores) each sees while it runs, on the `cores` that `ranks` ranks
    share, each rank with `workers` workers. Workers are runnable independently, each
    `worker_busy` of the time; the ranks' training processes `main_busy` of the time, all at once
    (ranks step together, so their own CPU phases, receiving a batch and the step's host part,
    fall together), each on `step_threads` threads then (the step's; see step_stretch)."""

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


def step_stretch(workers: int, worker_busy: float, cores: float, ranks: int = 1, step_threads: int = 1,
                  sync: float = 0.0) -> tuple[float, float]:
    """How much the step's CPU phase stretches beside the workers, and its CPU over its work. The
    stretch: the expected max(1, runnable threads / cores) over the workers runnable beside the
    step's T threads of every rank (on one thread, the training thread's, see contention), plus
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

