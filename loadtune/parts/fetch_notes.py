"""Inside each loading process, around torch's fetch of a batch: errors raised while loading
a sample or collating name the dataset index at which they happened (torch's map-style fetch,
the same steps, with a note added to the error), and each fetch's wall and CPU time is added to
counters the loop's process reads at the edges of a window (trial_process.execute; a watched run:
training_process.probe)."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from loadtune.measure.cpu import CpuReading, read_cpu, window_between
from loadtune.parts.failures import NOTE_PREFIX
from loadtune.record.measurement import CpuWindow, LoaderUse

# Per loading process, in a shared array of doubles: batches, fetch wall s, fetch CPU s. Slot i
# is worker i; the last slot is the training process (loading without workers).
FIELDS = 3
_counters: Any = None
_slot = 0


def count_fetches(counters: Any, slot: int) -> None:
    """Add this process's fetches to `slot` of `counters` (None: count nothing)."""
    global _counters, _slot
    _counters, _slot = counters, slot


def fetch_counters(workers: int, context: Any = None) -> Any:
    """Shared counters for each loading process's fetches: one slot per worker and one for the
    training process; `context` is the workers' multiprocessing context or start method."""
    import multiprocessing

    if context is None or isinstance(context, str):
        context = multiprocessing.get_context(context)
    return context.RawArray("d", (workers + 1) * FIELDS)


class WindowEdges:
    """What is read at each window's edges: the tree's CPU and the fetch counters of each
    loading process (`between` gives a Window's `cpu` and `loaders`)."""

    def __init__(self, counters: Any, workers: int) -> None:
        self.counters, self.workers = counters, workers

    def read(self) -> tuple[CpuReading, list[float]]:
        return read_cpu(), list(self.counters)

    def between(self, start: tuple[CpuReading, list[float]],
                end: tuple[CpuReading, list[float]]) -> tuple[CpuWindow, tuple[LoaderUse, ...]]:
        (cpu0, c0), (cpu1, c1) = start, end
        uses = []
        for slot in range(self.workers + 1):
            at = slot * FIELDS
            batches, wall_s, cpu_s = (c1[at + i] - c0[at + i] for i in range(FIELDS))
            worker = -1 if slot == self.workers else slot
            if worker == -1 and self.workers and not batches:
                continue  # with workers, this process fetches nothing
            uses.append(LoaderUse(worker, int(round(batches)), max(0.0, wall_s), max(0.0, cpu_s)))
        return window_between(cpu0, cpu1), tuple(uses)


def init_worker(user_init: Callable[[int], Any] | None, counters: Any, threads: int | None,
                worker_id: int) -> None:
    """A worker's first call: notes and counting installed in this process (spawned and
    forkserver workers do not inherit them), its threads set when the trial sets them (torch's
    and the OpenMP/BLAS pools'), then the user's own worker_init_fn."""
    install_fetch_notes()
    count_fetches(counters, worker_id)
    if threads is not None:
        import torch
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        torch.set_num_threads(threads)
        threadpool_limits(threads)
    if user_init is not None:
        user_init(worker_id)


def _count(started_s: float, started_cpu_s: float) -> None:
    counters = _counters
    if counters is not None:
        at = _slot * FIELDS
        counters[at] += 1
        counters[at + 1] += time.perf_counter() - started_s
        counters[at + 2] += time.thread_time() - started_cpu_s


def _indices_text(indices: Sequence[Any]) -> str:
    items = list(indices)
    if len(items) <= 4:
        return f"[{', '.join(map(str, items))}]"
    return f"[{items[0]}, {items[1]}, ..., {items[-1]}] ({len(items)} indices)"


def _note(exc: BaseException, text: str) -> None:
    note = NOTE_PREFIX + text
    if hasattr(exc, "add_note"):  # Python 3.11+: the note is printed with the traceback
        exc.add_note(note)
    else:
        setattr(exc, "__notes__", [*getattr(exc, "__notes__", []), note])


def _annotated_fetch(self: Any, possibly_batched_index: Any) -> Any:
    """torch's _MapDatasetFetcher.fetch, the same steps, with the failing index noted on the
    error, and counted. A `try` costs nothing until it raises; the loop runs as many calls as before."""
    started_s, started_cpu_s = time.perf_counter(), time.thread_time()
    try:
        return _map_fetch(self, possibly_batched_index)
    finally:
        _count(started_s, started_cpu_s)


def _counted(fetch: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def counted_fetch(self: Any, possibly_batched_index: Any) -> Any:
        started_s, started_cpu_s = time.perf_counter(), time.thread_time()
        try:
            return fetch(self, possibly_batched_index)
        finally:
            _count(started_s, started_cpu_s)

    counted_fetch.counted = True  # type: ignore[attr-defined]
    return counted_fetch


def _map_fetch(self: Any, possibly_batched_index: Any) -> Any:
    dataset = self.dataset
    if self.auto_collation:
        if hasattr(dataset, "__getitems__") and dataset.__getitems__:
            try:
                data = dataset.__getitems__(possibly_batched_index)
            except Exception as exc:
                _note(exc, f"at dataset indices {_indices_text(possibly_batched_index)} (__getitems__)")
                raise
        else:
            data = []
            for idx in possibly_batched_index:
                try:
                    data.append(dataset[idx])
                except Exception as exc:
                    _note(exc, f"at dataset index {idx}")
                    raise
    else:
        try:
            data = dataset[possibly_batched_index]
        except Exception as exc:
            _note(exc, f"at dataset index {possibly_batched_index}")
            raise
    try:
        return self.collate_fn(data)
    except Exception as exc:
        what = _indices_text(possibly_batched_index) if self.auto_collation else possibly_batched_index
        _note(exc, f"in collate_fn, batch of dataset indices {what}")
        raise


def install_fetch_notes() -> None:
    """Make map-style fetches in this process name the index at which the dataset failed, and
    count every fetch (map-style and iterable)."""
    try:
        from torch.utils.data._utils import fetch
    except ImportError:  # a torch without this private module: errors just lack the index
        return
    fetcher = getattr(fetch, "_MapDatasetFetcher", None)
    if fetcher is not None and fetcher.fetch is not _annotated_fetch:
        fetcher.fetch = _annotated_fetch
    iterable = getattr(fetch, "_IterableDatasetFetcher", None)
    if iterable is not None and not getattr(iterable.fetch, "counted", False):
        iterable.fetch = _counted(iterable.fetch)
