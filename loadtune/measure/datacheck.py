"""Whether each trial delivered the samples the baseline delivers (docs/methodology.md, "The same data"):
a faster config that repeats samples or loses some changes training, so it is never ranked or
recommended.

A map-style dataset's samples are the indices its sampler handed out in the training process
(loadtune.trial_process.sampled): exact, whatever the transforms. An IterableDataset's have a
key (loadtune.measure.fingerprint: a hash of a small slice of its bytes, with its label;
or its label or index alone where the bytes change from one read to the next). Either is
compared per epoch, so that order never matters (shuffle, in_order=False):

- duplicates: more of a trial's samples come again within one epoch than in the trial that
  repeats least (for keys, a small share is allowed: genuinely equal samples repeat in every
  config; a sampler that draws with replacement repeats by design), or ranks get the same
  samples in the same epoch (beyond a DistributedSampler's padding);
- different: the trial's whole epochs hold another number of samples than the reference's
  (known for keys where an epoch fit in a window, for indices from the sampler), or samples the
  reference never delivered in a whole epoch, or miss some it delivered (beyond one batch per
  rank, and for keys a small share: drop_last drops a different remainder each epoch);
- same: none of that.

Pure functions over keys and indices, so tests drive them with made-up ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from loadtune.record.measurement import Measurement, SamplerEpoch, Window
from loadtune.record.record import DATA_DIFFERENT, DATA_DUPLICATES, DATA_SAME

# Which key a check uses: the content key (bytes and label), or the label or index alone.
CONTENT, LABEL = "content", "label"
# A trial repeats samples when the share of its samples that come again within their epoch is
# above REPEAT_FACTOR times the least-repeating trial's share plus REPEAT_MARGIN.
REPEAT_FACTOR = 2.0
REPEAT_MARGIN = 0.05
# Keys that repeat more than this within an epoch even in the least-repeating trial (class
# labels, say) cannot show repeats: then only complete epochs are compared.
UNIQUE_KEYS_MAX_REPEAT = 0.05
# Complete epochs differ when their sizes or contents differ by more than one batch per rank
# plus this share of the epoch (keys; indices are exact: one batch per rank only).
EPOCH_DIFFERENCE = 0.05
# A sampler drawing with replacement: ranks whose draws match, position by position, at least
# this often drew the same (one seed); independent draws rarely match at all.
SAME_DRAWS = 0.5

# Causes, each with the fix the summary gives.
REPEATED, ACROSS_RANKS, EPOCH_SIZE, EPOCH_CONTENT = "repeated", "across ranks", "epoch size", "epoch content"
WORKERS_FIX = ("Each DataLoader worker ran the whole IterableDataset: split the stream in __iter__ with "
               "torch.utils.data.get_worker_info() (its id and num_workers), so that each worker yields its "
               "own part.")
SHARDS_FIX = ("A sharded dataset read by more workers than it has shards gives some shards to several workers: "
              "keep num_workers at or below the number of shards.")
SAMPLER_FIX = "The sampler gave some samples twice in one epoch: give each index once per epoch."
RANKS_FIX = ("The ranks received the same samples: give each rank its own share, with a DistributedSampler "
             "for a map-style dataset, or by splitting an IterableDataset on torch.distributed.get_rank() "
             "and get_world_size().")
DIFFERENT_FIX = ("The samples depend on the settings: make each sample depend only on its index or place in the "
                 "stream (not on the worker or rank that reads it), and check that the split between workers "
                 "covers every sample once.")
SAMPLER_DIFFERENT_FIX = ("The sampler hands out other indices with these settings than with the baseline's "
                         "(shuffle set in the sweep replaces the DataLoader's own sampler): keep the baseline's "
                         "sampler in every trial.")


@dataclass(frozen=True)
class Delivery:
    """What one trial delivered, by one kind of key or by the sampler's indices: its samples,
    those that came again within their epoch on the same rank, those another rank also got in
    the same epoch, its complete epochs (all ranks' parts together) each as its keys sorted,
    and the sizes of its whole epochs where known."""

    samples: int
    repeated: int
    ranks: int = 1
    shared: int = 0  # samples another rank also got, in the same window and epoch
    shared_allowance: int = 0  # a DistributedSampler's padding: 2 * (ranks - 1) per epoch compared
    batch: int = 0  # the largest batch, in samples
    epochs: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    seen: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64), compare=False, repr=False)
    sizes: tuple[int, ...] = ()  # samples in each whole epoch known, all ranks together
    exact: bool = False  # the sampler's indices: compared exactly
    replacement: bool = False  # the sampler draws with replacement: repeats are by design

    @property
    def repeat_rate(self) -> float:
        return self.repeated / self.samples if self.samples else 0.0

    @property
    def shared_rate(self) -> float:
        return self.shared / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class Check:
    """A trial's data_check: SAME, DUPLICATES or DIFFERENT, or None when it could not be checked;
    the causes found and what is wrong, in words, for the reason column."""

    verdict: str | None
    causes: tuple[str, ...] = ()
    reason: str = ""


def _keys(window: Window, kind: str) -> np.ndarray | None:
    values = window.keys if kind == CONTENT else window.labels
    if not values or len(values) != sum(window.samples):
        return None
    if kind == CONTENT:
        return np.asarray(values, dtype=np.uint64)
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def segments(window: Window, kind: str = CONTENT, epoch_batches: int | None = None,
             ) -> list[tuple[np.ndarray, bool]] | None:
    """A window's keys split into its epochs' parts, each with whether it is a complete epoch
    (from an epoch's first batch to the batch before the next epoch's first; not one cut short
    by measure.epoch_batches). None when the window has no keys of that kind."""
    keys = _keys(window, kind)
    if keys is None:
        return None
    ends = np.cumsum(window.samples)
    batches = len(window.samples)
    firsts = sorted({0, *(i for i, start in enumerate(window.epoch_start) if start)})
    found = []
    for j, first in enumerate(firsts):
        last = firsts[j + 1] if j + 1 < len(firsts) else batches
        lo, hi = (int(ends[first - 1]) if first else 0), int(ends[last - 1])
        complete = (window.epoch_start[first] and j + 1 < len(firsts)
                    and (epoch_batches is None or last - first < epoch_batches))
        found.append((keys[lo:hi], bool(complete)))
    return found


def delivery(per_rank: Sequence[Sequence[Window]], kind: str = CONTENT, epoch_batches: int | None = None,
             ) -> Delivery | None:
    """What a trial delivered: `per_rank` holds each rank's windows, in the same order (one
    rank: the trial's windows). None when a window lacks keys of that kind."""
    split = []
    for windows in per_rank:
        found = [cut for w in windows if (cut := segments(w, kind, epoch_batches)) is not None]
        if not found or len(found) < len(windows):
            return None
        split.append(found)
    ranks = len(split)
    samples = repeated = shared = allowance = 0
    epochs, everything = [], []
    for rank_windows in split:
        for window in rank_windows:
            for keys, _ in window:
                samples += len(keys)
                repeated += len(keys) - len(np.unique(keys))
                everything.append(keys)
    for at in range(len(split[0])):
        parts = [rank_windows[at] for rank_windows in split]
        for k in range(min(len(p) for p in parts)):
            same_epoch = [p[k] for p in parts]
            if ranks > 1:
                for r, (keys, _) in enumerate(same_epoch):
                    others = np.concatenate([o for s, (o, _) in enumerate(same_epoch) if s != r])
                    shared += int(np.isin(keys, others).sum())
                allowance += 2 * (ranks - 1)
            if all(complete for _, complete in same_epoch):
                epochs.append(np.sort(np.concatenate([keys for keys, _ in same_epoch])))
    batch = max((max(w.samples, default=0) for windows in per_rank for w in windows), default=0)
    seen = np.unique(np.concatenate(everything)) if everything else np.empty(0, np.uint64)
    return Delivery(samples, repeated, ranks, shared, allowance, batch, tuple(epochs), seen,
                    tuple(len(e) for e in epochs))


def handed(per_rank: Sequence[Sequence[SamplerEpoch]]) -> Delivery | None:
    """What a trial delivered by its sampler's indices: `per_rank` holds each rank's epochs, in
    the same order (one rank: the trial's). Every index handed out counts, those drawn ahead
    for prefetching included: a sound sampler gives none twice in an epoch. None when a rank
    recorded none."""
    if not per_rank or any(not epochs for epochs in per_rank):
        return None
    ranks = len(per_rank)
    replacement = any(e.replacement for epochs in per_rank for e in epochs)
    every = [e.indices for epochs in per_rank for e in epochs]
    samples = sum(len(indices) for indices in every)
    repeated = 0 if replacement else sum(len(indices) - len(np.unique(indices)) for indices in every)
    shared = allowance = 0
    complete, sizes = [], []
    for at in range(min(len(epochs) for epochs in per_rank)):
        same_epoch = [epochs[at] for epochs in per_rank]
        if ranks > 1:
            shared += _shared_draws(same_epoch) if replacement else _shared_indices(same_epoch)
            allowance += 2 * (ranks - 1)
        if all(e.complete for e in same_epoch):
            complete.append(np.sort(np.concatenate([e.indices for e in same_epoch])))
        if all(e.size is not None for e in same_epoch):
            sizes.append(sum(e.size or 0 for e in same_epoch))
    batch = max(e.batch for epochs in per_rank for e in epochs)
    seen = np.unique(np.concatenate(every))
    return Delivery(samples, repeated, ranks, shared, allowance, batch, tuple(complete), seen, tuple(sizes),
                    exact=True, replacement=replacement)


def _shared_indices(same_epoch: Sequence[SamplerEpoch]) -> int:
    """Indices each rank handed out that another rank also handed out in the same epoch."""
    shared = 0
    for r, epoch in enumerate(same_epoch):
        others = np.concatenate([o.indices for s, o in enumerate(same_epoch) if s != r])
        shared += int(np.isin(epoch.indices, others).sum())
    return shared


def _shared_draws(same_epoch: Sequence[SamplerEpoch]) -> int:
    """Draws with replacement that another rank drew at the same place in the same epoch: ranks
    sampling independently rarely match there; ranks drawing with the same seed always do."""
    shared = 0
    for r, epoch in enumerate(same_epoch):
        matched = np.zeros(len(epoch.indices), bool)
        for s, other in enumerate(same_epoch):
            if s != r:
                n = min(len(epoch.indices), len(other.indices))
                matched[:n] |= epoch.indices[:n] == other.indices[:n]
        shared += int(matched.sum())
    return shared


def streams(measurement: Measurement) -> list[tuple[Window, ...]]:
    """Each rank's windows (the trial's own with one rank): the keys are kept per rank."""
    return [m.windows for m in measurement.ranks] if measurement.ranks else [measurement.windows]


def sampled(measurement: Measurement) -> list[tuple[SamplerEpoch, ...]]:
    """Each rank's sampler epochs (the trial's own with one rank)."""
    return [m.epochs.sampled for m in measurement.ranks] if measurement.ranks else [measurement.epochs.sampled]


def repeat_limit(floor: float, exact: bool = False) -> float:
    """The most a trial's samples may repeat within an epoch, given the least-repeating trial's
    share: with indices, none where that trial repeats none."""
    return REPEAT_FACTOR * floor + (0.0 if exact else REPEAT_MARGIN)


def compare(trial: Delivery, reference: Delivery, floor: float, reference_name: str = "the baseline") -> Check:
    """The check of one trial against the reference trial's delivery; `floor` is the share of
    samples the least-repeating trial repeated within an epoch."""
    causes, why = [], []
    unique = trial.exact or floor <= UNIQUE_KEYS_MAX_REPEAT
    if unique:
        limit = repeat_limit(floor, trial.exact)
        if trial.repeat_rate > limit:
            causes.append(REPEATED)
            why.append(_repeated(trial, reference, reference_name))
        across = max(limit, SAME_DRAWS) if trial.replacement else limit
        if trial.ranks > 1 and trial.shared > trial.shared_allowance and trial.shared_rate > across:
            causes.append(ACROSS_RANKS)
            why.append(_across(trial))
    if causes:
        return Check(DATA_DUPLICATES, tuple(causes), "; ".join(why))
    if (trial.sizes and reference.sizes) or (trial.epochs and reference.epochs):
        different = _epochs_differ(trial, reference, reference_name)
        if different is not None:
            return different
    elif not unique:
        return Check(None, reason=f"even the trial that repeats least repeats {floor:.0%} of its samples within "
                                  "an epoch, so the keys do not tell samples apart, and no whole epoch fit in a "
                                  "window to compare (raise measure.batches above the batches of an epoch)")
    return Check(DATA_SAME)


def _repeated(trial: Delivery, reference: Delivery, reference_name: str) -> str:
    if trial.exact:
        return (f"the sampler handed out {trial.repeated} of its {trial.samples} indices again within the same "
                f"epoch, against {reference.repeated} of {reference.samples} in {reference_name}")
    return (f"{trial.repeat_rate:.0%} of its samples came again within the same epoch, against "
            f"{reference.repeat_rate:.0%} in {reference_name}")


def _across(trial: Delivery) -> str:
    if trial.exact and trial.replacement:
        return (f"the ranks drew the same indices in the same order ({trial.shared} of its {trial.samples} draws): "
                "the same seed on every rank")
    if trial.exact:
        return f"{trial.shared} of its {trial.samples} indices also went to another rank in the same epoch"
    return f"{trial.shared_rate:.0%} of its samples also went to another rank in the same epoch"


def _epochs_differ(trial: Delivery, reference: Delivery, reference_name: str) -> Check | None:
    """DIFFERENT where whole epochs differ in size, or complete ones in content, by more than one
    batch per rank plus, for keys, EPOCH_DIFFERENCE of the epoch (DUPLICATES where a keyed epoch
    holds a whole multiple of the reference's samples: the stream delivered several times);
    else None. Content is not compared for a sampler drawing with replacement (each epoch its
    own draw)."""
    per_batch = max(trial.batch, reference.batch) * trial.ranks
    share = 0.0 if trial.exact else EPOCH_DIFFERENCE
    what = "indices" if trial.exact else "samples"

    def allowed(n: int) -> float:
        return per_batch + share * n

    sizes = sorted(set(reference.sizes))
    for n in (sorted(set(trial.sizes)) if sizes else ()):
        nearest = min(sizes, key=lambda size: abs(size - n))
        if abs(n - nearest) > allowed(max(n, nearest)):
            times = round(n / nearest) if nearest else 0
            if not trial.exact and times >= 2 and abs(n - times * nearest) <= allowed(n):  # the whole stream, again
                return Check(DATA_DUPLICATES, (REPEATED,),
                             f"an epoch delivered {n} samples where {reference_name} delivered {nearest}: "
                             f"each sample {times} times")
            said = (f"an epoch of its sampler holds {n} indices where {reference_name}'s holds {nearest}"
                    if trial.exact else f"an epoch delivered {n} samples where {reference_name} delivered {nearest}")
            return Check(DATA_DIFFERENT, (EPOCH_SIZE,), said)
    if trial.replacement or reference.replacement or not (trial.epochs and reference.epochs):
        return None
    for epoch in trial.epochs:
        foreign = int(np.count_nonzero(~np.isin(epoch, reference.seen)))
        if foreign > allowed(len(epoch)):
            return Check(DATA_DIFFERENT, (EPOCH_CONTENT,),
                         f"{foreign / len(epoch):.0%} of an epoch's {what} never came in {reference_name}")
    for epoch in reference.epochs:
        missing = int(np.count_nonzero(~np.isin(epoch, trial.seen)))
        if missing > allowed(len(epoch)):
            return Check(DATA_DIFFERENT, (EPOCH_CONTENT,),
                         f"{missing / len(epoch):.0%} of the {what} of an epoch of {reference_name} never came")
    return None


def check_all(deliveries: Mapping[str, Delivery], baseline: str) -> dict[str, Check]:
    """Every trial's check. The reference is the baseline, unless it repeats samples itself
    (then the trial that repeats least). Deliveries by indices and by keys are never compared
    with each other: give one kind."""
    if not deliveries:
        return {}
    floor = min(d.repeat_rate for d in deliveries.values())
    exact = all(d.exact for d in deliveries.values())
    reference = baseline
    if baseline not in deliveries or ((exact or floor <= UNIQUE_KEYS_MAX_REPEAT)
                                      and deliveries[baseline].repeat_rate > repeat_limit(floor, exact)):
        reference = min(deliveries, key=lambda name: deliveries[name].repeat_rate)
    name = "the baseline" if reference == baseline else reference
    return {trial: compare(d, deliveries[reference], floor, name) for trial, d in deliveries.items()}


def fixes(check: Check, iterable: bool | None) -> tuple[str, ...]:
    """The fix for each cause of a flagged check, one sentence each."""
    found: list[str] = []
    for cause in check.causes:
        if cause == REPEATED:
            found.extend((WORKERS_FIX, SHARDS_FIX) if iterable is not False else (SAMPLER_FIX,))
        elif cause == ACROSS_RANKS:
            found.append(RANKS_FIX)
        else:
            found.append(SAMPLER_DIFFERENT_FIX if iterable is False else DIFFERENT_FIX)
    return tuple(dict.fromkeys(found))
