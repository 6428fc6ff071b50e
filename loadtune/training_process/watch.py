"""One DataLoader of a training run, watched: its iterator wrapped so each batch's wait and step
are tallied (tally.Tally), its fetches counted and its process tree sampled as a sweep's trial's
are, and its counted intervals kept for the run's row (rows.Observed)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from loadtune.asked.config import MeasureSpec
from loadtune.measure.loop import WarmUp, batch_bytes, batch_len
from loadtune.record.measurement import ResourceSamples, Window
from loadtune.training_process.probe import Counting, CudaIdle, loader_objects, loader_settings
from loadtune.training_process.rows import LoaderTraits, Observed, WarmUpFigures
from loadtune.training_process.tally import Clocks, Interval, Tally, joined

# The sweep's warm-up (measure.warmup_batches and its per-worker extra, at their defaults).
_MEASURE = MeasureSpec()
# The process tree is sampled this often (memory far less often: MEMORY_CPU_BUDGET).
SAMPLE_INTERVAL_S = 1.0
# Raw per-batch samples kept at most: beyond, every other kept interval is let go and only every
# 2nd (then 4th, ...) later one kept, a systematic sample of the run's intervals; the row's figures
# are the kept intervals' (their mean is the run's), and the memory stays bounded on long runs.
KEPT_BATCHES = 200_000
AUTO = "auto"  # device_idle: CUDA events where the run trains on CUDA


class _Edges:
    """The interval edges: the fetch counters and CPU (WindowEdges), and the first reading starts
    the process tree's sampler."""

    def __init__(self, inner: Any, on_first_read: Callable[[], None]) -> None:
        self.inner, self.on_first_read, self.started = inner, on_first_read, False

    def read(self) -> Any:
        if not self.started:
            self.started = True
            self.on_first_read()
        return self.inner.read() if self.inner is not None else None

    def between(self, start: Any, end: Any) -> tuple[Any, tuple[Any, ...]]:
        return self.inner.between(start, end) if self.inner is not None else (None, ())


@dataclass(frozen=True)
class LoaderFacts:
    """What a watched loader is: its plain settings (probe.loader_settings), its length in batches
    (the run's epoch), its dataset's length and class ("module:qualname"), where known, and its
    keywords that are objects, named (probe.loader_objects: its collate_fn, its sampler...)."""

    settings: dict[str, Any]
    epoch_batches: int | None
    dataset_len: int | None
    dataset_spec: str | None
    objects: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, loader: Any) -> "LoaderFacts":
        dataset = getattr(loader, "dataset", None)
        return cls(loader_settings(loader), _length(loader), _length(dataset) if dataset is not None else None,
                   f"{type(dataset).__module__}:{type(dataset).__qualname__}" if dataset is not None else None,
                   loader_objects(loader))

    @property
    def loader_kwargs(self) -> dict[str, Any]:
        """Its DataLoader keywords as NAME.loader.json keeps them: the plain settings and the objects' names."""
        return {**self.settings, **self.objects}

    @property
    def workers(self) -> int:
        return int(self.settings.get("num_workers") or 0)

    @property
    def persistent(self) -> bool:
        return bool(self.settings.get("persistent_workers"))


@dataclass
class WatchHooks:
    """What a watch calls: `on_interval(watch)` after each interval it closed, `on_epoch()` as each
    epoch's iterator is about to be made."""

    on_interval: Callable[["LoaderWatch"], None] | None = None
    on_epoch: Callable[[], None] | None = None


@dataclass
class WatchSampling:
    """What is read beside the batches once counting starts: the process tree, sampled over each
    interval where `tree` (`sampler`: the one running), and the device's idle time for data
    (`device_idle`: AUTO, CUDA events where the run trains on CUDA; None: the host's wait)."""

    tree: bool = True
    device_idle: Any = AUTO
    sampler: Any = None


class KeptIntervals:
    """The intervals kept for the row, each with the tree's samples over it where taken: every one
    until KEPT_BATCHES raw samples, then every 2nd (4th, ...) one (`stride`). `seen` counts those
    closed (the run's short last one aside), `last` is the last one closed, kept or not."""

    def __init__(self) -> None:
        self.windows: list[Window] = []
        self.resources: list[ResourceSamples] = []
        self.stride = 1
        self.seen = 0
        self.last: Interval | None = None
        self._last_kept = False

    def add(self, interval: Interval, tail: bool, samples: ResourceSamples | None) -> None:
        self.last = interval
        if tail:  # the run's short last interval: part of the one before, when that one is kept
            if self._last_kept and self.windows:
                self.windows[-1] = joined(Interval(self.windows[-1], 0.0, 0.0), interval).window
            return
        self._last_kept = self.seen % self.stride == 0
        if self._last_kept:
            self.windows.append(interval.window)
            if samples is not None:
                self.resources.append(samples)
        self.seen += 1
        self._thin()

    def _thin(self) -> None:
        while sum(len(w) for w in self.windows) > KEPT_BATCHES and len(self.windows) > 1:
            self.windows = self.windows[::2]
            self.resources = self.resources[::2] if len(self.resources) > 1 else self.resources
            self.stride *= 2


def warm_up_rule(clock: Callable[[], float], workers: int, persistent: bool, epoch_batches: int | None) -> WarmUp:
    """The batches a watched loader drops before counting (the sweep's rule, at its defaults: see
    MeasureSpec), for `workers` workers and an epoch of `epoch_batches`; a tuned run's settings too."""
    extra = _MEASURE.extra_warmup_for(workers, persistent, epoch_batches)
    return WarmUp(clock, base=_MEASURE.warmup_batches, extra_batches=extra,
                  extra_max_s=_MEASURE.warmup_per_worker_max_s)


class LoaderWatch:
    """A watched DataLoader: `iterate` wraps each epoch's iterator; `observed` is what it saw."""

    def __init__(self, loader: Any, name: str, every_s: float, *, hooks: WatchHooks | None = None,
                 clocks: Clocks | None = None, sampling: WatchSampling | None = None) -> None:
        clocks = clocks if clocks is not None else Clocks()
        self.name = name
        self._loader = _weak(loader)  # the loader is the training's: a watch keeps no old one (nor its workers) alive
        dataset = getattr(loader, "dataset", None)
        self._dataset = _weak(dataset) if dataset is not None else None
        self.facts = LoaderFacts.of(loader)
        self.hooks = hooks if hooks is not None else WatchHooks()
        self.counting = Counting(loader) if self.facts.workers or hasattr(loader, "dataset") else None
        self.sampling = sampling if sampling is not None else WatchSampling()
        self.kept = KeptIntervals()
        self.started = clocks.wall()
        self.ended: str | None = None  # how the run ended ("": by itself); None while it runs
        warmup = warm_up_rule(clocks.wall, self.facts.workers, self.facts.persistent, self.facts.epoch_batches)
        edges = _Edges(self.counting.edges if self.counting is not None else None, self._start_sampler)
        self.tally = Tally(clocks=clocks, every_s=every_s, warmup=warmup, probe=edges, on_interval=self._interval,
                           device=None)
        self.pinned: bool | None = None

    @property
    def closed(self) -> bool:
        return self.ended is not None

    def same_loader(self, loader: Any) -> bool:
        """Whether `loader` is this one made again (a new DataLoader each epoch): the same dataset
        object, the same settings."""
        dataset = getattr(loader, "dataset", None)
        return dataset is not None and self._dataset is not None and dataset is self._dataset() \
            and loader_settings(loader) == self.facts.settings

    def adopt(self, loader: Any) -> None:
        """Watch `loader` from now on as this one (same_loader)."""
        self._loader = _weak(loader)
        if self.counting is not None:
            self.counting.install(loader)

    @property
    def loader(self) -> Any:
        """The loader watched now (None once the training has let it go)."""
        return self._loader()

    # --- the loop ---------------------------------------------------------------------------

    def iterate(self, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """A new epoch's iterator (`make()`), watched."""
        if self.hooks.on_epoch is not None:
            self.hooks.on_epoch()
        since = self.tally.epoch_starting()
        inner = make()
        self.tally.epoch_made(since)
        return _Iterator(self, inner)

    def next_from(self, inner: Iterator[Any]) -> Any:
        tally = self.tally
        marks = tally.asked()
        counting = self.counting
        if counting is not None:
            counting.around_fetch()
        try:
            batch = next(inner)
        except StopIteration:
            tally.ended()
            raise
        finally:
            if counting is not None:
                counting.after_fetch()
        first = tally.start.first_batch_s is None
        default = self.facts.settings.get("batch_size") or 1
        try:
            samples, size = batch_len(batch, default), batch_bytes(batch) if first else None
        except Exception:  # noqa: BLE001 - a batch of a shape not foreseen: counted as a batch
            samples, size = default, None
        tally.got(marks, samples, size)
        if first:
            self.pinned = _pinned(batch)
        return batch

    def close(self, reason: str = "") -> None:
        """The run is over (or the script failed: `reason`)."""
        if self.closed:
            return
        self.ended = reason
        self.tally.close()
        self._stop_sampler()

    # --- intervals --------------------------------------------------------------------------

    def _start_sampler(self) -> None:
        sampling = self.sampling
        if self.tally.device is None and sampling.device_idle is not None:
            # Asked once counting starts: by then the training has put its model on its device.
            self.tally.device = device_idle_for() if sampling.device_idle == AUTO else sampling.device_idle
        if not sampling.tree:
            return
        import os

        from loadtune.measure.resources import TreeSampler

        try:
            sampling.sampler = TreeSampler(os.getpid(), interval_s=SAMPLE_INTERVAL_S).start()
        except Exception:  # noqa: BLE001 - no sampling here: the row lacks memory figures
            sampling.sampler = None

    def _stop_sampler(self) -> ResourceSamples | None:
        sampler, self.sampling.sampler = self.sampling.sampler, None
        if sampler is None:
            return None
        try:
            samples: ResourceSamples = sampler.stop()
        except Exception:  # noqa: BLE001 - as above
            return None
        return samples

    def _interval(self, interval: Interval, tail: bool) -> None:
        samples = self._stop_sampler()
        if not self.closed:
            self._start_sampler()
        self.kept.add(interval, tail, samples)
        if self.hooks.on_interval is not None:
            self.hooks.on_interval(self)

    # --- what it saw --------------------------------------------------------------------------

    def observed(self) -> Observed:
        tally, facts, kept = self.tally, self.facts, self.kept
        start = tally.start
        return Observed(
            name=self.name, settings=facts.settings, windows=tuple(kept.windows),
            resources=tuple(kept.resources) if len(kept.resources) == len(kept.windows) else (),
            warm_up=WarmUpFigures(start.first_batch_s or 0.0, start.warmup_s, tally.warmup.done),
            traits=LoaderTraits(start.batch_bytes, facts.epoch_batches, bool(facts.workers) and not facts.persistent,
                                self.pinned),
            watched_s=tally.clocks.wall() - self.started, reason=self.ended or "")


class _Iterator:
    """An epoch's iterator, watched; everything else is the loader's own iterator's."""

    def __init__(self, watch: LoaderWatch, inner: Iterator[Any]) -> None:
        self._watch, self._inner = watch, inner

    def __iter__(self) -> "_Iterator":
        return self

    def __next__(self) -> Any:
        return self._watch.next_from(self._inner)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _length(loader: Any) -> int | None:
    try:
        return int(len(loader))
    except Exception:  # noqa: BLE001 - an iterable dataset without a length
        return None


def _pinned(batch: Any) -> bool | None:
    from loadtune.parts.device import first_tensor_pinned

    try:
        return first_tensor_pinned(batch)
    except Exception:  # noqa: BLE001 - not tensors
        return None


def _weak(value: Any) -> Callable[[], Any]:
    """A weak reference where the object takes one, else a strong one (called alike)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def device_idle_for() -> Any:
    """The device's idle time for data where the run trains on CUDA (see CudaIdle), else None."""
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            return CudaIdle(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - no CUDA: the host's wait is the wait
        pass
    return None
