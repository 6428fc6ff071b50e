"""A DataLoader's settings changed mid-epoch without losing or repeating a sample (loadtune.tune).

For a map-style dataset the epoch's order is drawn once from the user's loader (its sampler or
batch sampler, as its own iterator would draw it), and each setting's loader (a child: the same
dataset, collate_fn, worker_init_fn, generator and order, other settings) is handed the batches not
yet given to the loop. Batches a child's workers fetched ahead and never handed over are dropped
with its workers: fetched twice, handed once. An iterable dataset has no order to hand on: its
settings change at epoch ends only.

Under torch.distributed every rank changes at the same batch (Agreement): rank 0 searches, and
its word after each batch goes to the other ranks through the job's store.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from loadtune.asked.trials import DEFAULT_PREFETCH
from loadtune.parts.factory import taken_apart

# The settings a tuned run may change, in the order it tries them; semantics (shuffle, drop_last,
# in_order, the sampler, batch_size) never.
TUNABLE = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")


class Remaining:
    """The order a child loader iterates: the epoch's batches (or indices) not handed yet. It
    says what the user's batch sampler says of itself (its length: the epoch's; its batch size,
    drop_last and sampler), so the child's row records the user's loader (probe.batches_of)."""

    def __init__(self, loader: Any) -> None:
        self.items: list[Any] = []
        source = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
        self.epoch = len(source)
        # A loader made with a batch_sampler (accelerate's, for one) says None of both: its sampler knows.
        self.batch_size = loader.batch_size if loader.batch_size is not None else \
            getattr(loader.batch_sampler, "batch_size", None)
        self.drop_last = getattr(loader.batch_sampler, "drop_last", loader.drop_last)
        self.sampler = loader.sampler

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return self.epoch


@dataclass
class EpochOrder:
    """One epoch's order, drawn once; `handed`: how many of its items the loop has had."""

    items: list[Any]
    batched: bool  # items are batches of indices (the loader's batch_sampler), else single indices
    handed: int = 0

    @property
    def rest(self) -> list[Any]:
        return self.items[self.handed:]


def mid_epoch(loader: Any) -> bool:
    """Whether the loader's settings can change mid-epoch: a map-style dataset's order can be handed on."""
    return not _iterable(loader) and \
        (getattr(loader, "batch_sampler", None) is not None or getattr(loader, "sampler", None) is not None)


def draw_order(loader: Any) -> EpochOrder:
    """This epoch's order, as the loader's own iterator would draw it (one iter() of its sampler)."""
    if loader.batch_sampler is not None:
        return EpochOrder([list(b) for b in loader.batch_sampler], batched=True)
    return EpochOrder(list(loader.sampler), batched=False)


def settings_of(loader: Any) -> dict[str, Any]:
    """The tunable settings of a DataLoader, as its plain settings hold them (parts.factory.taken_apart)."""
    settings = taken_apart(loader)[1]
    return {k: settings[k] for k in TUNABLE}


@dataclass
class Child:
    """One setting's loader over the user's dataset, and the order it is fed."""

    settings: dict[str, Any]
    loader: Any
    feed: Remaining | None = None  # None: an iterable dataset, or the user's own sampler
    iterators: list[Any] = field(default_factory=list)

    def start(self, order: EpochOrder | None) -> Iterator[Any]:
        if self.feed is not None and order is not None:
            self.feed.items = order.rest
        it: Iterator[Any] = iter(self.loader)
        if not any(it is mine for mine in self.iterators):  # persistent workers: the same iterator each epoch
            self.iterators.append(it)
        return it

    def stop(self) -> None:
        """Its workers shut down now (those it fetched ahead are dropped with them)."""
        for it in self.iterators:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self.iterators.clear()
        if getattr(self.loader, "_iterator", None) is not None:
            self.loader._iterator = None


def child_loader(loader: Any, settings: Mapping[str, Any], switching: bool) -> Child:
    """A DataLoader as `loader` with `settings`; `switching`: fed the epoch's order (EpochOrder)."""
    from torch.utils.data import DataLoader

    workers = int(settings.get("num_workers") or 0)
    keywords: dict[str, Any] = {
        "num_workers": workers, "collate_fn": loader.collate_fn, "pin_memory": bool(settings.get("pin_memory")),
        "worker_init_fn": loader.worker_init_fn, "generator": loader.generator,
        "pin_memory_device": getattr(loader, "pin_memory_device", ""), "in_order": getattr(loader, "in_order", True),
        "timeout": loader.timeout if workers else 0}
    if workers:
        keywords.update(prefetch_factor=settings.get("prefetch_factor") or DEFAULT_PREFETCH,
                        persistent_workers=bool(settings.get("persistent_workers")),
                        multiprocessing_context=loader.multiprocessing_context)
    feed = Remaining(loader) if switching else None
    if feed is not None and loader.batch_sampler is not None:
        child = DataLoader(loader.dataset, batch_sampler=feed, **keywords)
    elif feed is not None:
        child = DataLoader(loader.dataset, batch_size=None, sampler=feed, **keywords)
    else:
        child = DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last,
                           sampler=None if _iterable(loader) else loader.sampler, **keywords)
    return Child(dict(settings), child, feed)


def _iterable(loader: Any) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(getattr(loader, "dataset", None), IterableDataset)


@dataclass(frozen=True)
class Word:
    """Rank 0's word after one batch of a search: the setting every rank runs next, whether rank
    0's loop changes setting now (`switch`), and whether the search has settled on it."""

    settings: dict[str, Any]
    switch: bool
    settled: bool


@dataclass
class Agreement:
    """One tuned loader on the ranks of a data-parallel job: rank 0 searches and, after each batch
    of the search, posts its Word to the job's store (the process group's key-value store, outside
    the training's collectives) under a key of this run and loader (`prefix`), this epoch and this
    batch; every other rank reads that key before it fetches its next batch (the store's get waits
    for it) and does as it says, so every rank changes setting at the same batch. The ranks of a
    data-parallel job go in step anyway (the gradient all-reduce), so a rank waits at most for
    the rest of rank 0's step. The last rank to read a key deletes it (where the store deletes);
    once the settled word is posted and read (`done`), no rank reads the store again.

    Another rank keeps the settings it ran (`ran`, in order). Where its own setting fails it goes
    back, on its own, to the one it ran before, and keeps it (`failed`: the one that failed), still
    reading rank 0's words until the settled one: it takes that one where it ran it here."""

    store: Any
    rank: int
    world: int
    prefix: str
    epoch: int = 0
    done: bool = False
    ran: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, Any] | None = None

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def key(self, batch: int) -> str:
        return f"{self.prefix}:{self.epoch}:{batch}"

    def post(self, batch: int, word: Word) -> None:
        self.store.set(self.key(batch), json.dumps(dataclasses.asdict(word)))
        self.done = word.settled

    def read(self, batch: int) -> Word:
        """Rank 0's word after `batch` (waiting for it as long as the store waits)."""
        key = self.key(batch)
        said = json.loads(self.store.get(key))
        if int(self.store.add(f"{key}:read", 1)) >= self.world - 1:  # every other rank has read it
            for stale in (key, f"{key}:read"):
                try:
                    self.store.delete_key(stale)
                except Exception:  # noqa: BLE001 - a store that does not delete keeps its few keys
                    pass
        word = Word(**said)
        self.done = word.settled
        return word

    def ran_here(self, settings: Mapping[str, Any]) -> bool:
        """Whether this rank ran `settings` and it did not fail (persistence aside: rank 0's kept
        setting is made persistent when it settles)."""
        def bare(s: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in s.items() if k != "persistent_workers"}

        return any(bare(s) == bare(settings) for s in self.ran)
