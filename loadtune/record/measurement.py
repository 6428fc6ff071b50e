"""What was observed: a trial's raw per-batch samples, kept as measured. Every figure is derived
from these (loadtune.decide.stats), so a new statistic never needs a new measurement. Built in a
trial process, sent to the sweep process, and never written to disk as such."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class CpuWindow:
    """CPU used over one counted window, read at its edges inside the trial process."""

    wall_s: float
    main_cpu_s: float  # the training process, all its threads (the pin-memory thread too)
    workers_cpu_s: float  # its DataLoader workers (and their children), live and reaped
    machine_busy_s: float | None = None  # every process on the machine (from /proc/stat)
    machine_cpus: int | None = None

    def plus(self, other: "CpuWindow") -> "CpuWindow":
        """Two processes' windows over the same time (ranks): CPU added, the longer wall."""
        return CpuWindow(max(self.wall_s, other.wall_s), self.main_cpu_s + other.main_cpu_s,
                         self.workers_cpu_s + other.workers_cpu_s, self.machine_busy_s, self.machine_cpus)


@dataclass(frozen=True)
class LoaderUse:
    """One loading process over a window, from counters it keeps around each batch fetch:
    worker id (-1: the training process itself, loading without workers), batches fetched,
    wall and CPU seconds inside fetch (reading, decoding, transforming and collating)."""

    worker: int
    batches: int
    fetch_wall_s: float
    fetch_cpu_s: float


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
    # CPU time of the training thread inside next(): receiving and rebuilding a batch from the
    # workers (or, without workers, loading it), apart from waiting for one to exist.
    wait_cpu_s: tuple[float, ...] = ()
    cpu: CpuWindow | None = None  # the tree's CPU over this window
    loaders: tuple[LoaderUse, ...] = ()  # each loading process over this window
    # What each counted sample was, in order (loadtune.measure.fingerprint): a 64-bit key
    # from a small slice of its bytes (with its label), and its label or index where the batch
    # has one. Empty when not taken (the ideal's repeated batch; batches without a per-sample
    # tensor) and in a combination of ranks, whose keys stay in each rank's own Measurement.
    keys: tuple[int, ...] = ()
    labels: tuple[int, ...] = ()
    # Where in its epoch the window's first batch was (0: the first batch of an epoch); each
    # later batch's place follows from it and epoch_start. None: not known (older files).
    epoch_pos: int | None = None

    def __len__(self) -> int:
        return len(self.wait_s)

    def positions(self) -> tuple[int | None, ...]:
        """Each batch's place in its epoch (0 at an epoch start); None before the window's first
        epoch start where epoch_pos is unknown."""
        out: list[int | None] = []
        at = None if self.epoch_pos is None else self.epoch_pos - 1
        for start in self.epoch_start:
            at = 0 if start else (at + 1 if at is not None else None)
            out.append(at)
        return tuple(out)


@dataclass(frozen=True)
class SamplerEpoch:
    """One epoch of a map-style dataset's sampler (one iter() of the DataLoader), as recorded in
    the training process (loadtune.trial_process.sampled): the indices it handed out, in order,
    those drawn ahead for prefetching included."""

    indices: np.ndarray = field(compare=False, repr=False)  # int64
    complete: bool  # the sampler's epoch ran to its end
    size: int | None  # samples in the whole epoch: counted when complete, else its sampler's len(); None: unknown
    batch: int  # the largest batch handed out, in samples
    replacement: bool = False  # the sampler draws with replacement: indices repeat by design


# Reading PSS makes the kernel walk a process's page tables: about 10 ms for a process that
# has imported torch, against 0.1 ms for its CPU, threads and reads. So memory is read at
# start(), at stop(), and in between only as often as keeps that reading under this share
# of one core (3 processes that imported torch: about every 15 s). Reading a process's
# memory map also holds its mmap lock for those milliseconds, which delays the shared-memory
# hand-over of a batch: so rarely, and growth is taken from the first and last readings.
MEMORY_CPU_BUDGET = 0.002


@dataclass(frozen=True)
class ProcessSample:
    """One process at one moment. `pid` and `started` (its create_time) identify it."""

    pid: int
    ppid: int
    started: float
    cpu_s: float  # user + system of the process itself, cumulative
    children_cpu_s: float  # user + system of its children that it has reaped, cumulative
    pss_bytes: int | None  # PSS, or USS where memory_metric says so; None: not read this time, unreadable, zombie
    num_threads: int | None  # None for a zombie
    read_bytes: int | None  # cumulative, reaped children included (ResourceSamples.io_metric); None: unavailable
    pss_file_bytes: int | None = None  # the file-backed part of pss_bytes (libraries, mmap'd files); None: unknown

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, self.started)


@dataclass(frozen=True)
class Sample:
    """The tree at one moment: the root first, then its descendants."""

    t_s: float
    processes: tuple[ProcessSample, ...]
    memory: bool = True  # whether memory was read at this sample (the sampler's: never the first, always the last)


@dataclass(frozen=True)
class ResourceSamples:
    """Raw samples of one window, as the sampler took them."""

    root_pid: int
    samples: tuple[Sample, ...]
    memory_metric: str  # MEMORY_PSS or MEMORY_USS
    io_metric: str | None  # IO_READ_BYTES, IO_READ_CHARS, or None when reads cannot be counted
    interval_s: float
    sampler_cpu_s: float  # CPU the sampling itself used (all samples, the first and last included)
    memory_cpu_budget: float = MEMORY_CPU_BUDGET
    in_root: bool = True  # the sampler ran as a thread of the root process (its CPU counted there)
    # Processes that count as main processes besides the root: data-parallel ranks, each a
    # training loop (the root then only launched them). Their descendants are workers.
    main_pids: tuple[int, ...] = ()

    @property
    def mains(self) -> frozenset[int]:
        return frozenset((self.root_pid, *self.main_pids))


@dataclass(frozen=True)
class TrialStart:
    """A trial until its counted windows: building it, its first batch, and the warm-up."""

    first_batch_s: float
    warmup_s: float = 0.0  # after the first batch, until the counted windows start
    warmup_batches: int = 0  # batches not counted, the first one included
    setup_s: float = 0.0  # building the dataset, loader and step before the first batch


@dataclass(frozen=True)
class LoaderEpochs:
    """The epochs of a trial's DataLoader: what its sampler handed out, and their lengths."""

    # A map-style dataset's sampler, each epoch this process started (warm-up included); empty
    # for an IterableDataset and in a combination of ranks (each rank's stay in its own).
    sampled: tuple[SamplerEpoch, ...] = ()
    # Batches in one whole epoch of the DataLoader (its len(), per rank; the training run's epoch),
    # and in each epoch the windows saw (measure.epoch_batches, or whole epochs); None: unknown.
    dataset_batches: int | None = None
    window_epoch_batches: int | None = None
    # Its DataLoader starts its workers again at each epoch (workers, not persistent): an epoch's
    # start then costs what the trial's first batch did.
    restarts_workers: bool = False


# A window is not ended early before this many counted batches: fewer say too little of its pace.
MIN_BATCHES_BEFORE_BEHIND = 4


@dataclass(frozen=True)
class Behind:
    """When a counted window ends early, clearly behind (the sweep's racing, batch by batch): once
    even a window whose remaining batches each took as little as its fastest batch so far (its
    wait, transfer and step) could not reach `bar_samples_per_s`. The waits of each epoch's
    first `early_places` batches are left out of that best case (0 where the windows hold the
    training run's epochs whole: then the window's figures are the run's), so an epoch start the
    run weighs less than the window does never ends it."""

    bar_samples_per_s: float
    early_places: int = 0
    min_batches: int = MIN_BATCHES_BEFORE_BEHIND


@dataclass(frozen=True)
class Measurement:
    """What one trial observed: its start (the first batch and warm-up) and its counted windows."""

    start: TrialStart
    windows: tuple[Window, ...]
    pinned: bool | None = None
    batch_bytes: int | None = None  # bytes of tensors in the first batch (what workers pass on)
    resources: tuple[ResourceSamples, ...] = ()  # the sampled process tree over the counted windows
    # With data-parallel ranks: each rank's own Measurement, in rank order; `windows` then
    # holds their combination (see combine_ranks).
    ranks: tuple["Measurement", ...] = ()
    epochs: LoaderEpochs = LoaderEpochs()
    behind: bool = False  # racing ended its window early: clearly behind the leader (see Behind)


def _summed_cpu(windows: Sequence[CpuWindow | None]) -> CpuWindow | None:
    known = [w for w in windows if w is not None]
    if not windows or len(known) < len(windows):
        return None
    total = known[0]
    for w in known[1:]:
        total = total.plus(w)
    return total


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
            wait_cpu_s=mean("wait_cpu_s") if all(len(w.wait_cpu_s) == len(w) for w in parts) else (),
            cpu=_summed_cpu([w.cpu for w in parts]),
            loaders=tuple(use for w in parts for use in w.loaders),
            epoch_pos=parts[0].epoch_pos,
        ))
    pinned = [m.pinned for m in per_rank]
    return Measurement(
        start=TrialStart(
            first_batch_s=max(m.start.first_batch_s for m in per_rank),
            warmup_s=max(m.start.warmup_s for m in per_rank),
            warmup_batches=max(m.start.warmup_batches for m in per_rank),
            setup_s=max(m.start.setup_s for m in per_rank),
        ),
        windows=tuple(windows),
        pinned=None if None in pinned else all(pinned),
        batch_bytes=per_rank[0].batch_bytes,
        ranks=tuple(per_rank),
        epochs=dataclasses.replace(per_rank[0].epochs, sampled=()),
    )
