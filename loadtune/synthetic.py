"""Datasets whose per-sample cost is known exactly: ground truth for the analytical model.

sleep_cost: each sample waits `cost_s` (I/O-like, uses no CPU).
cpu_cost:   each sample burns `cost_s` of its thread's CPU time (decode-like).
mixed_cost: some CPU and some waiting, with every n-th sample much slower.
All return small float tensors of `sample_shape`.
The streams at the end feed wrong data on purpose (duplicates across workers, shards read twice)
and augmented_cost changes bytes per read: ground truth for the data check.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset


class SleepCost(Dataset[Any]):
    def __init__(self, num_samples: int, cost_s: float, sample_shape: Sequence[int]) -> None:
        self.num_samples, self.cost_s, self.sample_shape = num_samples, cost_s, tuple(sample_shape)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        time.sleep(self.cost_s)
        return torch.full(self.sample_shape, float(index)), index


class CpuCost(SleepCost):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        end = time.thread_time() + self.cost_s
        while time.thread_time() < end:
            pass
        return torch.full(self.sample_shape, float(index)), index


class SleepCostStream(IterableDataset[Any]):
    """An iterable twin of SleepCost, sharded across DataLoader workers."""

    def __init__(self, num_samples: int, cost_s: float, sample_shape: Sequence[int]) -> None:
        self.num_samples, self.cost_s, self.sample_shape = num_samples, cost_s, tuple(sample_shape)

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, stride = (info.id, info.num_workers) if info else (0, 1)
        for index in range(start, self.num_samples, stride):
            time.sleep(self.cost_s)
            yield torch.full(self.sample_shape, float(index)), index


def sleep_cost(num_samples: int = 512, cost_s: float = 0.001, sample_shape: Sequence[int] = (16,)) -> SleepCost:
    return SleepCost(num_samples, cost_s, sample_shape)


def cpu_cost(num_samples: int = 512, cost_s: float = 0.001, sample_shape: Sequence[int] = (16,)) -> CpuCost:
    return CpuCost(num_samples, cost_s, sample_shape)


def sleep_cost_stream(num_samples: int = 512, cost_s: float = 0.001,
                      sample_shape: Sequence[int] = (16,)) -> SleepCostStream:
    return SleepCostStream(num_samples, cost_s, sample_shape)


class MixedCost(SleepCost):
    """Each sample burns `cpu_s` of CPU and waits `sleep_s`; every `slow_every`-th sample
    costs `slow_factor` times more, so batches vary in cost (where prefetch depth matters)."""

    def __init__(self, num_samples: int, cpu_s: float, sleep_s: float, slow_every: int, slow_factor: float,
                 sample_shape: Sequence[int]) -> None:
        super().__init__(num_samples, 0.0, sample_shape)
        self.cpu_s, self.sleep_s, self.slow_every, self.slow_factor = cpu_s, sleep_s, slow_every, slow_factor

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        factor = self.slow_factor if self.slow_every and index % self.slow_every == 0 else 1.0
        end = time.thread_time() + self.cpu_s * factor
        while time.thread_time() < end:
            pass
        time.sleep(self.sleep_s * factor)
        return torch.full(self.sample_shape, float(index)), index


def mixed_cost(num_samples: int = 512, cpu_s: float = 0.0005, sleep_s: float = 0.001, slow_every: int = 7,
               slow_factor: float = 8.0, sample_shape: Sequence[int] = (16,)) -> MixedCost:
    return MixedCost(num_samples, cpu_s, sleep_s, slow_every, slow_factor, sample_shape)


class UnevenBatches(SleepCost):
    """Samples that wait `fast_s`, except those of about one batch in `slow_every` (chosen by a
    fixed hash of the batch number), which wait `slow_s`: workers that finish a fast batch then
    sit idle behind a slow one when DataLoader takes batches in order and prefetches little."""

    def __init__(self, num_samples: int, fast_s: float, slow_s: float, slow_every: int, batch_size: int,
                 sample_shape: Sequence[int]) -> None:
        super().__init__(num_samples, fast_s, sample_shape)
        self.slow_s, self.slow_every, self.batch_size = slow_s, slow_every, batch_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        slow = (index // self.batch_size) * 2654435761 % 2**32 % self.slow_every == 0
        time.sleep(self.slow_s if slow else self.cost_s)
        return torch.full(self.sample_shape, float(index)), index


def uneven_batches(num_samples: int = 512, fast_s: float = 0.0005, slow_s: float = 0.008, slow_every: int = 4,
                   batch_size: int = 8, sample_shape: Sequence[int] = (16,)) -> UnevenBatches:
    return UnevenBatches(num_samples, fast_s, slow_s, slow_every, batch_size, tuple(sample_shape))


class ManyTensors(Dataset[list[torch.Tensor]]):
    """Cheap samples made of `parts` small tensors each: every batch hands over that many
    shared-memory tensors, which the training process must receive and rebuild one by one."""

    def __init__(self, num_samples: int, parts: int, sample_shape: Sequence[int]) -> None:
        self.num_samples, self.cost_s, self.sample_shape = num_samples, 0.0, tuple(sample_shape)
        self.parts = parts
        self.template = [torch.zeros(self.sample_shape) for _ in range(parts)]

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> list[torch.Tensor]:
        if index >= self.num_samples:
            raise IndexError(index)
        return self.template


def many_tensors(num_samples: int = 512, parts: int = 200, sample_shape: Sequence[int] = (4,)) -> ManyTensors:
    return ManyTensors(num_samples, parts, tuple(sample_shape))


class PythonArithmetic(SleepCost):
    """Samples computed in pure Python (no I/O, no numpy): `work` multiply-adds each."""

    def __init__(self, num_samples: int, work: int, sample_shape: Sequence[int]) -> None:
        super().__init__(num_samples, 0.0, sample_shape)
        self.work = work

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        total = index
        for i in range(self.work):
            total = (total * 31 + i) % 1000003
        return torch.full(self.sample_shape, float(total)), index


def python_arithmetic(num_samples: int = 512, work: int = 20000,
                      sample_shape: Sequence[int] = (16,)) -> PythonArithmetic:
    return PythonArithmetic(num_samples, work, tuple(sample_shape))


# Streams that feed other samples than they should, for the data check (docs/methodology.md, "The same data").


class UnsplitStream(SleepCostStream):
    """An IterableDataset that never calls get_worker_info(): every DataLoader worker yields the
    whole stream, so with N workers each sample arrives N times (a common mistake)."""

    def __iter__(self) -> Any:
        for index in range(self.num_samples):
            time.sleep(self.cost_s)
            yield torch.full(self.sample_shape, float(index)), index


class ShardedStream(SleepCostStream):
    """A stream in `num_shards` shards, each worker reading shard `id % num_shards`: with more
    workers than shards, some shards are read by several workers."""

    def __init__(self, num_samples: int, cost_s: float, sample_shape: Sequence[int], num_shards: int) -> None:
        super().__init__(num_samples, cost_s, sample_shape)
        self.num_shards = num_shards

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        workers = info.num_workers if info else 1
        mine = [info.id % self.num_shards] if info and workers > self.num_shards else \
            range(info.id if info else 0, self.num_shards, workers)
        for shard in mine:
            for index in range(shard, self.num_samples, self.num_shards):
                time.sleep(self.cost_s)
                yield torch.full(self.sample_shape, float(index)), index


class AugmentedCost(SleepCost):
    """SleepCost with random noise added to every read, like random augmentation: the same index
    gives other bytes each time, the same label (its index)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        sample, label = super().__getitem__(index)
        return sample + torch.rand(self.sample_shape), label


def unsplit_stream(num_samples: int = 512, cost_s: float = 0.001, sample_shape: Sequence[int] = (16,),
                   ) -> UnsplitStream:
    return UnsplitStream(num_samples, cost_s, sample_shape)


def sharded_stream(num_samples: int = 512, cost_s: float = 0.001, sample_shape: Sequence[int] = (16,),
                   num_shards: int = 2) -> ShardedStream:
    return ShardedStream(num_samples, cost_s, sample_shape, num_shards)


def augmented_cost(num_samples: int = 512, cost_s: float = 0.001, sample_shape: Sequence[int] = (16,),
                   ) -> AugmentedCost:
    return AugmentedCost(num_samples, cost_s, sample_shape)
