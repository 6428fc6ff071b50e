"""The measured loop: per-batch wait / h2d / step times from a loader, with an injected clock.

Nothing here knows about processes, configs or files; tests drive it with a fake clock and
a fake loader and get exact numbers.
"""

from __future__ import annotations

import time
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Protocol

from loadtune.errors import LoadtuneError
from loadtune.measurement import Measurement, Window
from loadtune.trial_process.fingerprint import Taken, sample_slice, window_keys

Clock = Callable[[], float]
Step = Callable[[Any], None]
Transfer = Callable[[Any], Any]


class EmptyLoaderError(LoadtuneError):
    """The loader produced no batch in a whole epoch."""


def batch_len(batch: Any, default: int = 1) -> int:
    """Samples in a batch: the first dimension of its first tensor (or array), nested or not."""
    stack = [batch]
    while stack:
        item = stack.pop(0)
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if item and not any(hasattr(x, "shape") or isinstance(x, (list, tuple, dict)) for x in item):
                return len(item)
            stack.extend(item)
    return default


def batch_bytes(batch: Any) -> int:
    """Bytes of every tensor and numpy array in a batch nested in tuples, lists and dicts.

    Anything with `nbytes` and `shape` counts (torch tensors, numpy arrays); other leaves
    (strings, numbers) travel pickled, not through shared memory, and count 0.
    """
    total = 0
    stack: list[Any] = [batch]
    while stack:
        item = stack.pop()
        if hasattr(item, "nbytes") and hasattr(item, "shape"):
            total += int(item.nbytes)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


class Feed:
    """Batches across epochs: a new iterator at the dataset's end or every `epoch_batches`."""

    def __init__(self, loader: Iterable[Any], epoch_batches: int | None) -> None:
        self._loader = loader
        self._epoch_batches = epoch_batches
        self._it: Iterator[Any] | None = None
        self._in_epoch = 0

    def _new_epoch(self) -> None:
        self._it = None  # let the old iterator shut its workers down now, inside the wait
        self._it = iter(self._loader)
        self._in_epoch = 0

    def next(self) -> tuple[Any, bool]:
        """The next batch and whether it is the first of a new epoch."""
        new_epoch = self._it is None or self._in_epoch == self._epoch_batches
        if new_epoch:
            self._new_epoch()
        try:
            batch = next(self._it)
        except StopIteration:
            if new_epoch:
                raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch "
                                       "(empty dataset, or batch_size larger than it with drop_last)") from None
            self._new_epoch()
            new_epoch = True
            try:
                batch = next(self._it)
            except StopIteration:
                raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch") from None
        self._in_epoch += 1
        return batch, new_epoch

    def close(self) -> None:
        self._it = None


class Sampling(Protocol):
    """The sweep's sampling of this process tree around the counted windows (see execute)."""

    def start(self) -> None: ...  # once the first batch is in, before the warm-up batches
    def ready(self) -> bool: ...  # whether the first reading is taken: the counted windows may start
    def end(self) -> None: ...  # just after the last counted batch


# The loop's three parts, and the names a profiler's regions get (see loadtune.profile).
PARTS = ("wait", "h2d", "step")
REGIONS = tuple(f"loadtune.{part}" for part in PARTS)
Region = Callable[[str], ContextManager[Any]]


class EdgeProbe(Protocol):
    """Read at each window's edges; `between` gives the Window's `cpu` and `loaders`."""

    def read(self) -> Any: ...
    def between(self, start: Any, end: Any) -> tuple[Any, tuple[Any, ...]]: ...


def _in_region(region: Region, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def inside(*args: Any) -> Any:
        with region(name):
            return call(*args)

    return inside


def measure_loop(
    loader: Iterable[Any],
    step: Step,
    *,
    warmup_batches: int,
    batches: int,
    repeats: int,
    epoch_batches: int | None = None,
    transfer: Transfer | None = None,
    clock: Clock = time.perf_counter,
    default_batch_size: int = 1,
    sampling: Sampling | None = None,
    copy_timer: Callable[[], float | None] | None = None,
    region: Region | None = None,
    fingerprint: bool = True,
    probe: EdgeProbe | None = None,
    cpu_clock: Clock = time.thread_time,
    extra_warmup_batches: int = 0,
    extra_warmup_max_s: float = 0.0,
) -> Measurement:
    """Run the loop a training job would run and time each part of every counted batch.

    The first batch is always set apart as `first_batch_s` (worker start-up, empty queues);
    `warmup_batches` counts the batches not counted, that first one included. Then
    `repeats` windows of `batches` counted batches follow back to back. Per batch: wait is
    the time blocked in next() (a new epoch's iterator creation included), h2d the
    transfer (0 without one), step the step. Timestamps are shared between the parts, so
    the parts of a window add up to its wall time (less the fingerprints, below). `sampling.start` runs once the first
    batch is in, before the warm-up batches, and `sampling.end` just after the last counted
    batch. After `warmup_batches`, up to `extra_warmup_batches` more run while fewer than
    `extra_warmup_max_s` seconds have passed since (workers' first batches: see MeasureSpec).
    The warm-up goes on past both, batch after batch as before (never
    pausing, which would let the queue fill), until `sampling.ready()`: a sampler's first
    reading then never overlaps a counted window. `copy_timer`, when given, returns the
    device-timed seconds of the transfer just made (Window.copy_s). `region`, when given,
    wraps each counted part in `region(name)` with the names of REGIONS (a profiler's
    record_function); the parts are timed the same way. `probe`, when given, is read at each
    window's edges (outside its timed parts) and what it saw between them kept in the Window
    (its CPU and each loading process's fetches). `cpu_clock` is the training thread's CPU
    clock: its time inside each wait is kept apart (Window.wait_cpu_s). With `fingerprint`,
    each counted batch's samples get their keys and labels (Window.keys, .labels): a small
    slice of each is copied out after its step, outside the timed parts (the clocks restart
    after it, so it adds nothing to wait, h2d or step), and hashed once the window is over.
    """
    feed = Feed(loader, epoch_batches)
    fetch, move, run_step = feed.next, transfer, step
    if region is not None:
        fetch = _in_region(region, REGIONS[0], feed.next)
        move = _in_region(region, REGIONS[1], transfer) if transfer is not None else None
        run_step = _in_region(region, REGIONS[2], step)
    try:
        t0 = clock()
        batch, _ = feed.next()
        first_batch_s = clock() - t0
        first_batch_bytes = batch_bytes(batch)
        if sampling is not None:
            sampling.start()
        done, base, base_done_at = 0, max(warmup_batches, 1), None
        while True:
            if done > 0:
                batch, _ = feed.next()
            step(transfer(batch) if transfer is not None else batch)
            done += 1
            if done < base:
                continue
            if base_done_at is None:
                base_done_at = clock()
            settling = done < base + extra_warmup_batches and clock() - base_done_at < extra_warmup_max_s
            if not settling and (sampling is None or sampling.ready()):
                break
        windows = []
        warmup_s = clock() - t0 - first_batch_s
        for _ in range(repeats):
            wait, h2d, stepped, samples, starts, copies, wait_cpu = [], [], [], [], [], [], []
            taken: list[Taken] = []
            edge = probe.read() if probe is not None else None
            t0 = clock()
            c0 = cpu_clock()
            for _ in range(batches):
                batch, new_epoch = fetch()
                t1 = clock()
                wait_cpu.append(cpu_clock() - c0)
                if move is not None:
                    moved = move(batch)
                    t2 = clock()
                    if copy_timer is not None:
                        copies.append(copy_timer())
                else:
                    moved, t2 = batch, t1
                run_step(moved)
                t3 = clock()
                wait.append(t1 - t0)
                h2d.append(t2 - t1)
                stepped.append(t3 - t2)
                samples.append(batch_len(batch, default_batch_size))
                starts.append(new_epoch)
                if fingerprint:
                    taken.append(sample_slice(batch, samples[-1]))
                    t0 = clock()
                else:
                    t0 = t3
                c0 = cpu_clock()
            use = probe.between(edge, probe.read()) if probe is not None else (None, ())
            copy_s = tuple(copies) if copies and None not in copies else ()
            keys, labels = window_keys(taken)
            windows.append(Window(tuple(wait), tuple(h2d), tuple(stepped), tuple(samples), tuple(starts), copy_s,
                                  tuple(wait_cpu), *use, keys=keys, labels=labels))
        if sampling is not None:
            sampling.end()
        return Measurement(first_batch_s=first_batch_s, windows=tuple(windows), batch_bytes=first_batch_bytes,
                           warmup_s=warmup_s, warmup_batches=done)
    finally:
        feed.close()
