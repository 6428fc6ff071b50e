"""The indices a map-style dataset's sampler hands out, per epoch (one iter() of the DataLoader):
what the data check compares for map-style datasets (loadtune.measure.datacheck), exact
whatever the transforms or labels.

The DataLoader draws every index in the training process, workers or not (its batch sampler,
or its sampler without batches), so a wrapper around that sampler sees each one as it is handed
out, those drawn ahead for prefetching included. In the loop it only appends each batch to a
list; the lists become arrays once the loop is over.
"""

from __future__ import annotations

from typing import Any, Iterator, Sized

import numpy as np

from loadtune.record.measurement import SamplerEpoch

# The DataLoader keywords that decide which indices it draws (and `generator`, which it keeps too).
SAMPLING_KEYS = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")
# How deep to look for `replacement` through samplers wrapped in samplers (a batch sampler's sampler).
_WRAPPED_DEPTH = 4


class IndexRecorder:
    """A sampler or batch sampler that notes what it hands out, per iter() (one epoch). With
    `cut`, each epoch ends after that many batches (items): the DataLoader then ends the epoch
    as it does at the dataset's end (its workers finish what they were given, persistent ones
    have nothing left to drain), so an epoch's start costs what it costs in training."""

    def __init__(self, inner: Any, batches: bool, cut: int | None = None) -> None:
        self.inner, self.batches, self.cut = inner, batches, cut
        self.handed: list[list[Any]] = []
        self.ended: list[bool] = []
        self.replacement = draws_with_replacement(inner)
        self.size = declared_size(inner, batches)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Any]:
        # Called now, as the DataLoader asks (a DistributedSampler reads its epoch then); an epoch
        # is noted at its first index, as a DataLoader with workers asks twice for each.
        return self._handing(iter(self.inner))

    def _handing(self, inner: Iterator[Any]) -> Iterator[Any]:
        for first in inner:
            handed = [first]
            self.handed.append(handed)
            self.ended.append(False)
            epoch = len(self.ended) - 1
            yield first
            for item in inner:
                if self.cut is not None and len(handed) >= self.cut:
                    return  # cut here: the sampler's own epoch did not end
                handed.append(item)
                yield item
            self.ended[epoch] = True
            return

    def epochs(self) -> tuple[SamplerEpoch, ...]:
        """Each epoch's indices as int64; empty when any is not a plain integer (a batch sampler
        of (index, size) pairs, a dataset keyed by names)."""
        found = []
        for items, ended in zip(self.handed, self.ended):
            taken = _indices(items, self.batches)
            if taken is None:
                return ()
            indices, batch = taken
            found.append(SamplerEpoch(indices, ended, len(indices) if ended else self.size, batch, self.replacement))
        return tuple(found)


def _indices(items: list[Any], batches: bool) -> tuple[np.ndarray, int] | None:
    """The indices handed out, flat, and the largest batch in samples; None unless integers."""
    if not items:
        return np.empty(0, np.int64), 0
    try:
        if not batches:
            flat = np.asarray(items)
            return (flat.astype(np.int64), 1) if flat.ndim == 1 and flat.dtype.kind in "iu" else None
        parts = [np.asarray(batch) for batch in items]
    except Exception:  # noqa: BLE001 - whatever the user's sampler yields: not indices to compare
        return None
    if any(part.ndim != 1 or (part.dtype.kind not in "iu" and part.size) for part in parts):
        return None
    return np.concatenate(parts).astype(np.int64), max(len(part) for part in parts)


def draws_with_replacement(sampler: Any) -> bool:
    """Whether the sampler, or one it wraps, says it draws with replacement (RandomSampler and
    WeightedRandomSampler with replacement=True): its indices repeat by design."""
    for _ in range(_WRAPPED_DEPTH):
        if getattr(sampler, "replacement", False) is True:
            return True
        sampler = getattr(sampler, "sampler", None)
        if sampler is None:
            break
    return False


def declared_size(inner: Any, batches: bool) -> int | None:
    """Samples in one whole epoch, from the sampler's len(): a sampler's own, or torch's
    BatchSampler's from its sampler's (less the last incomplete batch with drop_last). None
    where it has none (an infinite sampler) or a custom batch sampler says only its batches."""
    from torch.utils.data import BatchSampler

    try:
        if not batches:
            return len(inner)
        if type(inner) is BatchSampler:
            sampler = inner.sampler
            if not isinstance(sampler, Sized):
                return None
            n = len(sampler)
            return n - n % inner.batch_size if inner.drop_last else n
    except Exception:  # noqa: BLE001 - no len(), or one that fails: not known
        return None
    return None


def recording(dataset: Any, kwargs: dict[str, Any],
              cut: int | None = None) -> tuple[dict[str, Any], IndexRecorder | None]:
    """DataLoader keywords whose batch sampler (or sampler, with batch_size None) is the one
    the DataLoader would have built or been given, wrapped in an IndexRecorder that ends each
    epoch after `cut` batches, when given; unchanged, with no recorder, for an IterableDataset
    (no sampler: its keys are the samples' fingerprints, and its epochs cannot be cut so)."""
    from torch.utils.data import DataLoader, IterableDataset

    if isinstance(dataset, IterableDataset):
        return kwargs, None
    sampling = {key: kwargs[key] for key in (*SAMPLING_KEYS, "generator") if key in kwargs}
    built = DataLoader(dataset, **sampling)  # no workers: only to have its samplers built as it builds them
    kept = {key: value for key, value in kwargs.items() if key not in SAMPLING_KEYS}
    if built.batch_sampler is not None:
        recorder = IndexRecorder(built.batch_sampler, batches=True, cut=cut)
        kept["batch_sampler"] = recorder
    else:
        recorder = IndexRecorder(built.sampler, batches=False, cut=cut)
        kept.update(sampler=recorder, batch_size=None)
    return kept, recorder
