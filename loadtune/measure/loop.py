"""The measured loop: per-batch wait / h2d / step times from a loader, with an injected clock.

Nothing here knows about processes, configs or files; tests drive it with a fake clock and
a fake loader and get exact numbers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Protocol

from loadtune.core.errors import LoadtuneError
from loadtune.core.kinds import Z_ONE_SIDED
from loadtune.measure.fingerprint import Taken, sample_slice, window_keys
from loadtune.record.measurement import Behind, Measurement, TrialStart, Window

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
    """Batches across epochs: a new iterator at the dataset's end or every `epoch_batches` (the
    old iterator dropped with batches in flight: how an IterableDataset's epochs are cut; a
    map-style dataset's are cut by its sampler instead, see sampled.IndexRecorder)."""

    def __init__(self, loader: Iterable[Any], epoch_batches: int | None) -> None:
        self._loader = loader
        self._epoch_batches = epoch_batches
        self._it: Iterator[Any] | None = None
        self._in_epoch = 0

    def _new_epoch(self) -> Iterator[Any]:
        self._it = None  # let the old iterator shut its workers down now, inside the wait
        self._it = it = iter(self._loader)
        self._in_epoch = 0
        return it

    def next(self) -> tuple[Any, bool]:
        """The next batch and whether it is the first of a new epoch."""
        it = self._it
        new_epoch = it is None or self._in_epoch == self._epoch_batches
        if it is None or new_epoch:
            it = self._new_epoch()
        try:
            batch = next(it)
        except StopIteration:
            if new_epoch:
                raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch "
                                       "(empty dataset, or batch_size larger than it with drop_last)") from None
            it = self._new_epoch()
            new_epoch = True
            try:
                batch = next(it)
            except StopIteration:
                raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch") from None
        self._in_epoch += 1
        return batch, new_epoch

    @property
    def position(self) -> int:
        """Where in its epoch the next batch is, unless it starts a new one: batches handed out
        in the current epoch so far."""
        return self._in_epoch

    def close(self, keep: Callable[[Any], None] | None = None) -> None:
        """Drop the iterator (its workers stop), or hand it to `keep` to hold."""
        if keep is not None:
            keep(self._it)
        self._it = None


# Batches counted before the rest of a window is bounded by their mean (Pace): fewer leave the
# spread of the batches too unsure.
MIN_BATCHES_FOR_MEAN = 8
# The first-order correction that makes the normal's one-sided 95% point Student's t for the
# degrees of freedom of a spread from few batches (Cornish-Fisher: within 2% of t's from 7).
_T_CORRECTION = (Z_ONE_SIDED ** 3 + Z_ONE_SIDED) / 4


class Pace:
    """A window's best case as its batches come (see Behind), kept in running sums so each
    batch's check costs the same however long the window.

    Each batch still to come takes, at best, the larger of the fastest batch so far and the
    lower one-sided 95% bound of the mean batch so far (from MIN_BATCHES_FOR_MEAN batches on):
    the rest of the window runs at the config's own mean, which its batches so far bound from
    below; the fastest batch alone (a bound no batch beats) would let noise keep a config
    clearly behind running to nearly the end of its window."""

    def __init__(self, behind: Behind, batches: int, first_place: int) -> None:
        self.behind, self.batches, self.place = behind, batches, first_place
        self.done, self.samples, self.spent_s, self.fastest_s = 0, 0, 0.0, math.inf
        self.squares_s2 = 0.0

    def add(self, wait_s: float, busy_s: float, samples: int, epoch_start: bool) -> None:
        """One more counted batch: its wait, its transfer and step (`busy_s`), its samples."""
        self.place = 0 if epoch_start else self.place
        batch_s = busy_s + (0.0 if self.place < self.behind.early_places else wait_s)
        self.spent_s += batch_s
        self.squares_s2 += batch_s * batch_s
        self.place += 1
        self.done += 1
        self.samples += samples
        self.fastest_s = min(self.fastest_s, batch_s)

    def rest_batch_s(self) -> float:
        """The least time each batch still to come may take (see the class)."""
        n = self.done
        if n < MIN_BATCHES_FOR_MEAN:
            return self.fastest_s
        mean = self.spent_s / n
        sd = math.sqrt(max(self.squares_s2 / n - mean * mean, 0.0) * n / (n - 1))
        return max(self.fastest_s, mean - (Z_ONE_SIDED + _T_CORRECTION / (n - 1)) * sd / math.sqrt(n))

    def best_case_samples_per_s(self) -> float:
        """The most samples per second the whole window could still reach."""
        total_s = self.spent_s + (self.batches - self.done) * self.rest_batch_s()
        return self.samples * self.batches / self.done / total_s if total_s > 0 else math.inf

    def clearly_behind(self) -> bool:
        return self.behind.min_batches <= self.done < self.batches \
            and self.best_case_samples_per_s() < self.behind.bar_samples_per_s


class Sampling(Protocol):
    """The sweep's sampling of this process tree around the counted windows (see execute)."""

    def start(self) -> None: ...  # once the first batch is in, before the warm-up batches
    # Whether the counted windows may start: this process's warm-up is `settled` and the first
    # reading is taken. Asked after every warm-up batch from the warmup_batches-th on, whatever
    # `settled` says: with ranks it is a collective, so every rank must ask at the same batches.
    def ready(self, settled: bool) -> bool: ...
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


@dataclass(frozen=True)
class _Counted:
    """What each counted batch goes through: its parts (in a profiler's regions where asked)
    and the clocks and hooks read around them."""

    fetch: Callable[[], tuple[Any, bool]]
    position: Callable[[], int]
    move: Transfer | None
    step: Step
    clock: Clock
    cpu_clock: Clock
    copy_timer: Callable[[], float | None] | None
    probe: EdgeProbe | None
    fingerprint: bool
    default_batch_size: int


@dataclass
class _Columns:
    """One window's per-batch figures as they come, turned into a Window at its end."""

    wait: list[float] = field(default_factory=list)
    h2d: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    starts: list[bool] = field(default_factory=list)
    copies: list[float | None] = field(default_factory=list)
    wait_cpu: list[float] = field(default_factory=list)
    taken: list[Taken] = field(default_factory=list)

    def window(self, use: tuple[Any, tuple[Any, ...]], epoch_pos: int) -> Window:
        # A device timing missing for any batch leaves the window without one (not a partial one).
        copies = tuple(c for c in self.copies if c is not None)
        copy_s = copies if self.copies and len(copies) == len(self.copies) else ()
        keys, labels = window_keys(self.taken)
        return Window(tuple(self.wait), tuple(self.h2d), tuple(self.step), tuple(self.samples), tuple(self.starts),
                      copy_s, tuple(self.wait_cpu), *use, keys=keys, labels=labels, epoch_pos=epoch_pos)


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
    on_phase: Callable[[str], None] | None = None,
    behind: Behind | None = None,
    keep: Callable[[Any], None] | None = None,
) -> Measurement:
    """Run the loop a training job would run and time each part of every counted batch.

    The first batch is set apart (`first_batch_s`: worker start-up, empty queues) and counts
    among the `warmup_batches`; then `repeats` windows of `batches` counted batches run back
    to back. Per batch: wait is the time blocked in next() (a new epoch's iterator included),
    h2d the transfer (0 without one), step the step; the parts share their timestamps, so a
    window's parts add up to its wall time. The hooks: `sampling` (see _warm_up), `copy_timer`
    (device-timed seconds of the transfer just made: Window.copy_s), `region` (wraps each
    counted part in `region(name)`, names from REGIONS: a profiler's record_function),
    `probe` (read at each window's edges: Window.cpu, .loaders), `cpu_clock` (the training
    thread's CPU inside each wait: Window.wait_cpu_s) and `fingerprint` (each counted batch's
    keys and labels: Window.keys, .labels, taken outside the timed parts) and `on_phase` (told
    "first batch", "warm-up", "window 1" ... "window N" and "teardown" as each begins, outside
    the timed parts: see trial_process.phases). With `behind`, a window clearly behind ends
    early (see Behind) and no window follows it: Measurement.behind says so.
    """
    feed = Feed(loader, epoch_batches)
    counted = _Counted(fetch=feed.next, position=lambda: feed.position, move=transfer, step=step, clock=clock,
                       cpu_clock=cpu_clock, copy_timer=copy_timer, probe=probe, fingerprint=fingerprint,
                       default_batch_size=default_batch_size)
    plan = _Plan(warmup_batches=warmup_batches, extra_batches=extra_warmup_batches,
                 extra_max_s=extra_warmup_max_s, batches=batches, repeats=repeats, behind=behind)
    try:
        return _run(feed, counted, region, plan, sampling, on_phase if on_phase is not None else _no_phase)
    finally:
        feed.close(keep)


@dataclass(frozen=True)
class _Plan:
    """How many batches the loop runs: the warm-up's (see WarmUp) and the counted windows'."""

    warmup_batches: int
    extra_batches: int
    extra_max_s: float
    batches: int
    repeats: int
    behind: Behind | None = None


def _in_regions(counted: _Counted, region: Region) -> _Counted:
    """The counted parts each inside its profiler region (names from REGIONS)."""
    move = counted.move
    return dataclasses.replace(
        counted, fetch=_in_region(region, REGIONS[0], counted.fetch),
        move=_in_region(region, REGIONS[1], move) if move is not None else None,
        step=_in_region(region, REGIONS[2], counted.step))


def _run(feed: Feed, counted: _Counted, region: Region | None, plan: _Plan, sampling: Sampling | None,
         phase: Callable[[str], None]) -> Measurement:
    """The first batch, the warm-up (its batches moved and stepped outside any region), then
    the counted windows; see measure_loop."""
    clock, move, step = counted.clock, counted.move, counted.step
    if region is not None:
        counted = _in_regions(counted, region)
    phase("first batch")
    t0 = clock()
    batch, _ = feed.next()
    first_batch_s = clock() - t0
    first_batch_bytes = batch_bytes(batch)
    phase("warm-up")
    if sampling is not None:
        sampling.start()
    done = _warm_up(feed, batch, lambda b: step(move(b) if move is not None else b), clock, sampling,
                    base=max(plan.warmup_batches, 1), extra_batches=plan.extra_batches,
                    extra_max_s=plan.extra_max_s)
    warmup_s = clock() - t0 - first_batch_s
    windows: list[Window] = []
    behind = False
    for n in range(1, plan.repeats + 1):
        phase(f"window {n}")
        window = _window(counted, plan.batches, plan.behind)
        windows.append(window)
        if len(window) < plan.batches:
            behind = True
            break
    phase("teardown")
    if sampling is not None:
        sampling.end()
    return Measurement(TrialStart(first_batch_s, warmup_s=warmup_s, warmup_batches=done), windows=tuple(windows),
                       batch_bytes=first_batch_bytes, behind=behind)


def _no_phase(name: str) -> None:
    pass


class WarmUp:
    """When the uncounted batches are done, batch by batch: `base` batches (the first one
    included), then up to `extra_batches` more while fewer than `extra_max_s` seconds have passed
    since (workers' first batches: see MeasureSpec). The sweep's trials and a watched run
    (loadtune.training_process) drop the same batches by this one rule."""

    def __init__(self, clock: Clock, *, base: int, extra_batches: int, extra_max_s: float) -> None:
        self.clock, self.base, self.extra_batches, self.extra_max_s = clock, max(base, 1), extra_batches, extra_max_s
        self.done = 0
        self._base_done_at: float | None = None

    def after_batch(self) -> bool | None:
        """One more uncounted batch ran: None while fewer than `base` have, else whether the
        extra batches are done too (settled)."""
        self.done += 1
        if self.done < self.base:
            return None
        if self._base_done_at is None:
            self._base_done_at = self.clock()
        return not (self.done < self.base + self.extra_batches
                    and self.clock() - self._base_done_at < self.extra_max_s)


def _warm_up(feed: Feed, first: Any, run: Step, clock: Clock, sampling: Sampling | None, *,
             base: int, extra_batches: int, extra_max_s: float) -> int:
    """Run the uncounted batches, `first` (already fetched) included; return how many ran.

    Which batches are uncounted is WarmUp's rule. The warm-up then goes on, batch after batch
    (never pausing, which would let the queue fill), until `sampling.ready()`: a sampler's first
    reading never overlaps a counted window. Whether the extra batches are done goes by this
    process's clock, so it is handed to `sampling.ready` rather than deciding alone: ranks decide
    it together (a rank that stopped asking a batch before another would pair its collectives
    wrongly, and the group would hang).
    """
    rule = WarmUp(clock, base=base, extra_batches=extra_batches, extra_max_s=extra_max_s)
    batch = first
    while True:
        if rule.done > 0:
            batch, _ = feed.next()
        run(batch)
        settled = rule.after_batch()
        if settled is None:
            continue
        if sampling.ready(settled) if sampling is not None else settled:
            return rule.done


def _window(counted: _Counted, batches: int, behind: Behind | None = None) -> Window:
    """One window of `batches` counted batches, or fewer where it is clearly `behind`; the probe
    is read at its edges, outside the timed parts."""
    columns = _Columns()
    edge = counted.probe.read() if counted.probe is not None else None
    epoch_pos = counted.position()
    t0 = counted.clock()
    c0 = counted.cpu_clock()
    pace = Pace(behind, batches, epoch_pos) if behind is not None else None
    for _ in range(batches):
        t0 = _counted_batch(counted, columns, t0, c0)
        if pace is not None:
            pace.add(columns.wait[-1], columns.h2d[-1] + columns.step[-1], columns.samples[-1], columns.starts[-1])
            if pace.clearly_behind():
                break
            t0 = counted.clock()  # the check adds to no part
        c0 = counted.cpu_clock()
    use = counted.probe.between(edge, counted.probe.read()) if counted.probe is not None else (None, ())
    return columns.window(use, 0 if columns.starts[0] else epoch_pos)


def _counted_batch(counted: _Counted, columns: _Columns, t0: float, c0: float) -> float:
    """Fetch, move and step one batch, noting each part in `columns`; return when the next wait starts.

    `t0` and `c0` are the wall and CPU clocks when this batch's wait started. The fingerprint's
    slice is copied after the step and the clock read again after it, so it adds to no part.
    """
    batch, new_epoch = counted.fetch()
    t1 = counted.clock()
    columns.wait_cpu.append(counted.cpu_clock() - c0)
    if counted.move is not None:
        moved = counted.move(batch)
        t2 = counted.clock()
        if counted.copy_timer is not None:
            columns.copies.append(counted.copy_timer())
    else:
        moved, t2 = batch, t1
    counted.step(moved)
    t3 = counted.clock()
    columns.wait.append(t1 - t0)
    columns.h2d.append(t2 - t1)
    columns.step.append(t3 - t2)
    columns.samples.append(batch_len(batch, counted.default_batch_size))
    columns.starts.append(new_epoch)
    if not counted.fingerprint:
        return t3
    columns.taken.append(sample_slice(batch, columns.samples[-1]))
    return counted.clock()
