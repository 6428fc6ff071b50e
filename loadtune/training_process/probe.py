"""What a watched DataLoader tells besides its timings, with the instruments a trial uses:
each loading process's fetches counted (parts.fetch_notes, installed through the loader's
worker_init_fn), the tree's CPU at each interval's edges, and on CUDA the device's idle time for
data (CUDA events)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from loadtune.asked.config import SPEC_KEYS
from loadtune.parts.factory import taken_apart
from loadtune.parts.fetch_notes import WindowEdges, count_fetches, fetch_counters, init_worker, install_fetch_notes

# The DataLoader's settings a watched row has columns for (the others are kept beside it, in
# NAME.loader.json, for `loadtune init --from`).
SETTING_KEYS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size")


def loader_settings(loader: Any) -> dict[str, Any]:
    """The loader's own plain settings, as a config's loader block holds them
    (parts.factory.taken_apart); an object that is not a DataLoader: what it has of SETTING_KEYS."""
    try:
        from torch.utils.data import DataLoader

        if isinstance(loader, DataLoader):
            settings = taken_apart(loader)[1]
            batches_of(settings, loader)
            return settings
    except ImportError:
        pass
    settings = {key: getattr(loader, key) for key in SETTING_KEYS if hasattr(loader, key)}
    if not settings.get("num_workers"):
        settings["prefetch_factor"] = None
    return settings


def loader_objects(loader: Any) -> dict[str, str]:
    """The DataLoader's keywords that are objects, not plain settings, each named as NAME.loader.json
    keeps it: its functions (config.SPEC_KEYS) by callable_spec, so that a config's loader block can
    import them back; its own sampler, batch sampler or generator by its class. Nothing for an
    object that is not a DataLoader."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:  # pragma: no cover - torch is a dependency
        return {}
    if not isinstance(loader, DataLoader):
        return {}
    parts = taken_apart(loader)[0]
    init: Any = parts.get("worker_init_fn")
    if _counting_already(init):  # the watch's own wrapper around the user's
        parts["worker_init_fn"] = init.args[0]
    if "batch_sampler" in parts:  # accelerate's BatchSamplerShard holds the user's
        parts["batch_sampler"] = getattr(parts["batch_sampler"], "batch_sampler", parts["batch_sampler"])
    return {key: callable_spec(value) if key in SPEC_KEYS else type(value).__name__
            for key, value in parts.items() if value is not None}


def callable_spec(func: Any) -> str:
    """A DataLoader's function as a config's loader block names it: "module:qualname" where that
    imports back to this very function (one of a script run as __main__: "path/to/script.py:qualname",
    or with -m its module's name), else by its own name alone, with no module to import it from
    (a lambda, a function defined inside another: "pad_collate"; a partial or an object that is
    called: "partial(pad_collate, ...)", "PadCollate(...)")."""
    module, name = getattr(func, "__module__", None), getattr(func, "__name__", None)
    # By its qualified name, or by its name where the module exports it under that (torch.stack).
    for qualname in dict.fromkeys((getattr(func, "__qualname__", None), name)):
        if isinstance(qualname, str) and isinstance(module, str) and "<" not in qualname:
            where = _importable_from(module, qualname, func)
            if where is not None:
                return f"{where}:{qualname}"
    if isinstance(name, str):
        return name
    if isinstance(func, functools.partial):
        return f"partial({callable_spec(func.func).rpartition(':')[2]}, ...)"
    return f"{type(func).__name__}(...)"


def _importable_from(module: str, qualname: str, func: Any) -> str | None:
    """Where `func` imports back from as `qualname`: its module's name (a script run as __main__: its
    file, or the module -m ran), or None where that names something else or is not imported."""
    found: Any = sys.modules.get(module)
    where = module
    if module == "__main__" and found is not None:
        spec = getattr(found, "__spec__", None)
        file = getattr(found, "__file__", None)
        where = spec.name if spec is not None and spec.name != "__main__" else \
            str(Path(file).resolve()) if isinstance(file, str) else ""
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return where if where and found is not None and found is func else None


def batches_of(settings: dict[str, Any], loader: Any) -> None:
    """A loader made around a batch sampler (a user's own, or accelerate's, always: its DataLoader has
    batch_size None and the user's BatchSampler, or a BatchSamplerShard of it): the batch size,
    drop_last and shuffle the batches are made with, as the row's settings, where it says them."""
    if settings.get("batch_size") is not None:
        return
    batches = getattr(loader, "batch_sampler", None)
    size = getattr(batches, "batch_size", None)
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        return
    settings["batch_size"] = size
    drop_last = getattr(batches, "drop_last", None)
    if isinstance(drop_last, bool):
        settings["drop_last"] = drop_last
    inner = getattr(batches, "batch_sampler", batches)  # BatchSamplerShard holds the user's
    try:
        from torch.utils.data import RandomSampler

        if isinstance(getattr(inner, "sampler", None), RandomSampler):
            settings["shuffle"] = True
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


class Counting:
    """The loader's fetches counted: its workers count theirs from their first call (the loader's
    worker_init_fn wraps the user's), the training process its own around each next() when it
    loads without workers. Workers already started (persistent, before the watch) count nothing."""

    def __init__(self, loader: Any) -> None:
        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.counters: Any = None
        self.edges: WindowEdges | None = None
        try:
            install_fetch_notes()
            self.counters = fetch_counters(self.workers, getattr(loader, "multiprocessing_context", None))
            self.install(loader)
            self.edges = WindowEdges(self.counters, self.workers)
        except Exception:  # noqa: BLE001 - a loader that refuses it is watched without fetch figures
            self.counters, self.edges = None, None

    def install(self, loader: Any) -> None:
        """`loader`'s workers count into these counters (a loader made again for each epoch, over
        the same dataset with the same settings, counts as the one before it)."""
        if self.workers and self.counters is not None:
            user_init = getattr(loader, "worker_init_fn", None)
            if not _counting_already(user_init):
                loader.worker_init_fn = functools.partial(init_worker, user_init, self.counters, None)

    def around_fetch(self) -> None:
        """Before next() on a loader without workers: this process's fetches count as its."""
        if self.counters is not None and not self.workers:
            count_fetches(self.counters, self.workers)

    def after_fetch(self) -> None:
        if self.counters is not None and not self.workers:
            count_fetches(None, 0)


def _counting_already(init: Any) -> bool:
    return isinstance(init, functools.partial) and init.func is init_worker


class CudaIdle:
    """The device's idle time for data, from CUDA events on the current stream: one recorded when
    the loop asks for a batch, one when it has it. Nothing else is queued between the two, so the
    second completes when the device has finished the work queued before the ask, or when the
    batch arrived, whichever is later: the time between them is the device's idle time waiting
    for this batch. Read at each interval's end (the last event synchronised once)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch, self.device = torch, device

    def asked(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return event

    def got(self, mark: Any) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return (mark, event)

    def idle_s(self, pairs: list[Any]) -> list[float]:
        pairs[-1][1].synchronize()
        return [max(0.0, a.elapsed_time(b) / 1e3) for a, b in pairs]
