"""A trial's DataLoader: its keywords (specs turned into callables), the epochs it is told of,
and the ideal feed (one batch kept on the device)."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Mapping

from loadtune.asked.config import THREAD_KEYS
from loadtune.asked.trials import Trial
from loadtune.parts.factory import load_callable
from loadtune.parts.fetch_notes import init_worker


def loader_kwargs(trial: Trial, base_dir: str, counters: Any = None,
                  parts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """DataLoader keywords for a trial: specs turned into callables, unsupported defaults dropped;
    the objects of the user's own DataLoader (`parts`: its sampler or batch_sampler, collate_fn,
    worker_init_fn, generator) kept unless the config sets the same thing; each worker counts
    its fetches in `counters` (see fetch_notes)."""
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    kwargs = {}
    for key, value in trial.loader_kwargs.items():
        if key in THREAD_KEYS:
            continue  # applied by loadtune (see apply_main_threads, fetch_notes.init_worker)
        if key in ("collate_fn", "worker_init_fn") and value is not None:
            value = load_callable(value, base_dir, f"loader.{key}")
        if key not in accepted:
            if key == "in_order" and value is True:
                continue  # older torch: always in order
            raise ValueError(f"this torch's DataLoader has no keyword {key!r}")
        kwargs[key] = value
    _keep_parts(kwargs, parts or {})
    if kwargs.get("num_workers"):
        # Workers started with spawn or forkserver do not inherit the annotated fetch.
        kwargs["worker_init_fn"] = functools.partial(init_worker, kwargs.get("worker_init_fn"), counters,
                                                     trial.loader_kwargs.get("worker_threads"))
    return kwargs


def _keep_parts(kwargs: dict[str, Any], parts: Mapping[str, Any]) -> None:
    if "batch_sampler" in parts:  # it decides batch size, order and the last batch itself
        for key in ("batch_size", "shuffle", "sampler", "drop_last"):
            kwargs.pop(key, None)
        kwargs["batch_sampler"] = parts["batch_sampler"]
    elif "sampler" in parts and not kwargs.get("shuffle"):  # shuffle set in the config replaces it
        kwargs["sampler"] = parts["sampler"]
    for key in ("collate_fn", "worker_init_fn", "generator"):
        if kwargs.get(key) is None and key in parts:
            kwargs[key] = parts[key]


def apply_main_threads(threads: int | None) -> None:
    """The training process's torch intra-op threads, when the trial sets them."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


class Epochs:
    """A DataLoader whose DistributedSampler is told each new epoch, so shuffles differ."""

    def __init__(self, loader: Any, sampler: Any) -> None:
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def __iter__(self) -> Any:
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)


def epoch_length(loader: Any, epoch_batches: int | None) -> int | None:
    """Batches in one of the measured loop's epochs: the loader's length, cut at
    `epoch_batches`; None where neither is known (an IterableDataset without a length)."""
    try:
        length: int | None = len(loader.loader if isinstance(loader, Epochs) else loader)
    except TypeError:
        length = None
    if epoch_batches is None:
        return length
    return epoch_batches if length is None else min(length, epoch_batches)


@dataclass(frozen=True)
class EpochPlan:
    """How long the measured loop's epochs are, and what cuts them."""

    dataset_batches: int | None  # one whole epoch of the DataLoader (its len()): the training run's
    window_batches: int | None  # each epoch the counted windows see
    sampler_cut: int | None = None  # the sampler ends each epoch after this many batches (sampled.IndexRecorder)
    feed_cut: int | None = None  # the loop drops the iterator after this many (measure.Feed)


def epoch_plan(loader: Any, epoch_batches: int | None, sampler_can_cut: bool) -> EpochPlan:
    """The epochs of a trial's loop: to the dataset's end, or cut every `measure.epoch_batches`.
    A sampler's cut (a map-style dataset) ends the epoch as the dataset's end does; an
    IterableDataset's epochs can only be cut by dropping the iterator, with batches in flight."""
    try:
        length: int | None = len(loader.loader if isinstance(loader, Epochs) else loader)
    except TypeError:
        length = None
    cut = epoch_batches if epoch_batches is not None and (length is None or epoch_batches < length) else None
    if cut is None:
        return EpochPlan(length, length)
    if sampler_can_cut:
        return EpochPlan(length, cut, sampler_cut=cut)
    return EpochPlan(length, cut, feed_cut=cut)
