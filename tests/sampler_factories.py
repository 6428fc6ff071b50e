"""DataLoaders whose samplers are sound or not, for the data check's tests (tests/test_data_check.py):
a shuffle that ignores the rank, one that gives an index twice per epoch, and a DistributedSampler."""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import DataLoader, Sampler
from torch.utils.data.distributed import DistributedSampler

from loadtune.synthetic import sleep_cost


class Shuffled(Sampler):
    """Every index once per epoch in a new order, the same on every rank (it ignores the rank)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        self.epoch += 1
        return iter(torch.randperm(self.n, generator=generator).tolist())


class RepeatsOne(Sampler):
    """Every index once in order, then index 0 again: one index twice in each epoch."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n + 1

    def __iter__(self) -> Iterator[int]:
        return iter([*range(self.n), 0])


def ignoring_rank(num_samples: int = 64, batch_size: int = 8) -> DataLoader:
    return DataLoader(sleep_cost(num_samples, 0.0), batch_size=batch_size, sampler=Shuffled(num_samples))


def repeating(num_samples: int = 24, batch_size: int = 8) -> DataLoader:
    return DataLoader(sleep_cost(num_samples, 0.0), batch_size=batch_size, sampler=RepeatsOne(num_samples))


def distributed(num_samples: int = 64, batch_size: int = 8) -> DataLoader:
    """A DistributedSampler built by the factory itself: the rank from the process group."""
    dataset = sleep_cost(num_samples, 0.0)
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, shuffle=True))
