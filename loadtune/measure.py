"""The measured loop: per-batch wait / h2d / step times from a loader, with an injected clock.

Nothing here knows about processes, configs or files; tests drive it with a fake clock and
a fake loader and get exact numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from loadtune.errors import LoadtuneError

Clock = Callable[[], float]
Step = Callable[[Any], None]
Transfer = Callable[[Any], Any]


class EmptyLoaderError(LoadtuneError):
    """The loader produced no batch in a whole epoch."""


@dataclass(frozen=True)
class Window:
    """One repeat: raw per-counted-batch samples, in the order they happened."""

    wait_s: tuple[float, ...]
    h2d_s: tuple[float, ...]
    step_s: tuple[float, ...]
    samples: tuple[int, ...]
    epoch_start: tuple[bool, ...]
    # The copy itself timed on the device (CUDA events), where it was: h2d_s is the host's
    # wall time for it (launch and synchronisation included), which is what the loop waits.
    copy_s: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.wait_s)


@dataclass(frozen=True)
class Measurement:
    """What one trial observed: time to its first batch and its counted windows."""

    first_batch_s: float
    windows: tuple[Window, ...]
    pinned: bool | None = None
    batch_bytes: int | None = None  # bytes of tensors in the first batch (what workers pass on)
    resources: tuple[Any, ...] = ()  # ResourceSamples of the counted windows, one per process
    warmup_s: float = 0.0  # after the first batch, until the counted windows start
    setup_s: float = 0.0  # building the dataset, loader and step before the first batch
    # With data-parallel ranks: each rank's own Measurement, in rank order; `windows` then
    # holds their combination (see combine_ranks).
    ranks: tuple["Measurement", ...] = ()


def combine_ranks(per_rank: Sequence[Measurement]) -> Measurement:
    """Ranks that ran in step (each step ended with an all_reduce) as one trial: per counted
    batch, the samples of all ranks and each part's mean time over the ranks, so throughput is
    the ranks' summed throughput and the wait ratio their mean. The first batch and warm-up
    take the slowest rank's time; pinned is true only when every rank's batches were."""
    if not per_rank:
        raise ValueError("combine_ranks needs at least one rank")
    n = len(per_rank)
    windows = []
    for parts in zip(*(m.windows for m in per_rank)):
        if len({len(w) for w in parts}) != 1:
            raise ValueError("ranks counted different numbers of batches")

        def mean(field: str) -> tuple[float, ...]:
            return tuple(sum(vals) / n for vals in zip(*(getattr(w, field) for w in parts)))

        windows.append(Window(
            wait_s=mean("wait_s"), h2d_s=mean("h2d_s"), step_s=mean("step_s"),
            samples=tuple(sum(vals) for vals in zip(*(w.samples for w in parts))),
            epoch_start=tuple(any(vals) for vals in zip(*(w.epoch_start for w in parts))),
            copy_s=mean("copy_s") if all(len(w.copy_s) == len(w) for w in parts) else (),
        ))
    pinned = [m.pinned for m in per_rank]
    return Measurement(
        first_batch_s=max(m.first_batch_s for m in per_rank),
        windows=tuple(windows),
        pinned=None if None in pinned else all(pinned),
        batch_bytes=per_rank[0].batch_bytes,
        warmup_s=max(m.warmup_s for m in per_rank),
        setup_s=max(m.setup_s for m in per_rank),
        ranks=tuple(per_rank),
    )


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


class _Feed:
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
    on_sampling_start: Callable[[], None] | None = None,
    on_sampling_end: Callable[[], None] | None = None,
    sampling_ready: Callable[[], bool] | None = None,
    copy_timer: Callable[[], float | None] | None = None,
) -> Measurement:
    """Run the loop a training job would run and time each part of every counted batch.

    The first batch is always set apart as `first_batch_s` (worker start-up, empty queues);
    `warmup_batches` counts the batches not counted, that first one included. Then
    `repeats` windows of `batches` counted batches follow back to back. Per batch: wait is
    the time blocked in next() (a new epoch's iterator creation included), h2d the
    transfer (0 without one), step the step. Timestamps are shared between the parts, so
    the parts of a window add up to its wall time. `on_sampling_start` runs once the first
    batch is in, before the warm-up batches, and `on_sampling_end` just after the last counted
    batch. When `sampling_ready` is given, the warm-up goes on past `warmup_batches`, batch
    after batch as before (never pausing, which would let the queue fill), until it returns
    True: a sampler's first reading then never overlaps a counted window. `copy_timer`, when
    given, returns the device-timed seconds of the transfer just made (Window.copy_s).
    """
    from loadtune.resources import batch_bytes

    feed = _Feed(loader, epoch_batches)
    try:
        t0 = clock()
        batch, _ = feed.next()
        first_batch_s = clock() - t0
        first_batch_bytes = batch_bytes(batch)
        if on_sampling_start is not None:
            on_sampling_start()
        done = 0
        while True:
            if done > 0:
                batch, _ = feed.next()
            step(transfer(batch) if transfer is not None else batch)
            done += 1
            if done >= max(warmup_batches, 1) and (sampling_ready is None or sampling_ready()):
                break
        windows = []
        warmup_s = clock() - t0 - first_batch_s
        for _ in range(repeats):
            wait, h2d, stepped, samples, starts, copies = [], [], [], [], [], []
            t0 = clock()
            for _ in range(batches):
                batch, new_epoch = feed.next()
                t1 = clock()
                if transfer is not None:
                    moved = transfer(batch)
                    t2 = clock()
                    if copy_timer is not None:
                        copies.append(copy_timer())
                else:
                    moved, t2 = batch, t1
                step(moved)
                t3 = clock()
                wait.append(t1 - t0)
                h2d.append(t2 - t1)
                stepped.append(t3 - t2)
                samples.append(batch_len(batch, default_batch_size))
                starts.append(new_epoch)
                t0 = t3
            copy_s = tuple(copies) if copies and None not in copies else ()
            windows.append(Window(tuple(wait), tuple(h2d), tuple(stepped), tuple(samples), tuple(starts), copy_s))
        if on_sampling_end is not None:
            on_sampling_end()
        return Measurement(first_batch_s=first_batch_s, windows=tuple(windows), batch_bytes=first_batch_bytes,
                           warmup_s=warmup_s)
    finally:
        feed.close()
