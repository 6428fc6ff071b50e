"""Training-code shapes a factory may return: a loader builder with its own collate_fn and
sampler, and a Lightning-style data module. Each notes in `folder` that its parts ran."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class Sequences(Dataset):
    """Variable-length token sequences (lengths 3..34), as a text pipeline has them."""

    def __init__(self, num_items: int) -> None:
        self.num_items = num_items

    def __len__(self) -> int:
        return self.num_items

    def __getitem__(self, index: int) -> dict[str, Any]:
        length = 3 + index % 32
        return {"tokens": torch.arange(length) + index, "label": index % 5}


class EveryOtherFirst(Sampler):
    """Even indices first, then odd ones: an order no built-in sampler gives."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter([*range(0, self.n, 2), *range(1, self.n, 2)])

    def __len__(self) -> int:
        return self.n


class PadCollate:
    """Pads each batch to its own longest sequence; notes the process it ran in."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        open(os.path.join(self.folder, f"collate-{os.getpid()}"), "w").close()
        longest = max(len(item["tokens"]) for item in items)
        tokens = torch.zeros(len(items), longest, dtype=torch.long)
        for row, item in enumerate(items):
            tokens[row, : len(item["tokens"])] = item["tokens"]
        return {"tokens": tokens, "lengths": torch.tensor([len(i["tokens"]) for i in items]),
                "labels": torch.tensor([i["label"] for i in items])}


def make_loader(folder: str, num_items: int = 600, batch_size: int = 16) -> DataLoader:
    """What a training script's loader builder returns."""
    data = Sequences(num_items)
    return DataLoader(data, batch_size=batch_size, sampler=EveryOtherFirst(num_items), collate_fn=PadCollate(folder),
                      num_workers=1, prefetch_factor=3, persistent_workers=False)


class SequenceModule:
    """A Lightning-style data module: no Lightning needed, the same three calls."""

    def __init__(self, folder: str, num_items: int = 600) -> None:
        self.folder, self.num_items = folder, num_items
        self.data: Sequences | None = None

    def prepare_data(self) -> None:
        open(os.path.join(self.folder, "prepared"), "w").close()

    def setup(self, stage: str) -> None:
        open(os.path.join(self.folder, f"setup-{stage}"), "w").close()
        self.data = Sequences(self.num_items)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=12, shuffle=True, collate_fn=PadCollate(self.folder), num_workers=2)


def make_module(folder: str, num_items: int = 600) -> SequenceModule:
    return SequenceModule(folder, num_items)


def make_distributed_loader(folder: str, num_items: int = 400) -> DataLoader:
    """A loader built for data-parallel training: its DistributedSampler asks the process group."""
    from torch.utils.data.distributed import DistributedSampler

    data = Sequences(num_items)
    return DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=True),
                      collate_fn=PadCollate(folder), num_workers=1)
