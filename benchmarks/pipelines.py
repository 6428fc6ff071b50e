"""Datasets and a training step for benchmarks/recommend.py, named in its configs as
"pipelines.py:NAME" (relative to the config file) or by absolute path.

augmented_images: small colour images, each first waited for (`read_s`, a file read's
                  latency) then augmented with numpy (random crop, flip, brightness and
                  contrast, noise, blur, cutout, normalisation), the CPU-side work of a
                  vision pipeline: 0.2 ms of CPU per sample plus about 0.15 ms per pass of
                  noise and blur (on the 2-core development machine).
make_cnn_step:    a small CNN (two conv layers, ten classes) trained on each batch: forward,
                  backward and an SGD step, on the CPU, in the main process, with as many
                  intra-op threads as asked.
make_cpu_train_step: the same CNN trained with torch's default intra-op threads (one per
                  core), as a user training a small model on the CPU leaves them: its threads
                  compete with the DataLoader's workers for the cores.

PIPELINES holds whole pipelines in benchmarks/recommend.py's form (dataset, loader, step; an
epoch of EPOCH_BATCHES batches), for the scripts that sweep pipelines by name:
  cnn-threads: augmented_images (0.3 ms read wait and about 0.5 ms of numpy augmentation a
               sample) in batches of 64, each trained by make_cpu_train_step; baseline: the
               DataLoader defaults (num_workers=0).

Only numpy and torch are imported at the top, so a fresh process that uses them starts fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

MEAN = np.array([0.49, 0.48, 0.45], dtype=np.float32)
STD = np.array([0.25, 0.24, 0.26], dtype=np.float32)


class AugmentedImages(Dataset):
    """`num_samples` images of `size` px cut from a bank of (size + 2 * pad) px images, each
    after a wait of `read_s`, with `passes` rounds of noise and blur: the CPU cost per sample
    grows with `passes`."""

    def __init__(self, num_samples: int, size: int, pad: int, passes: int, read_s: float, classes: int,
                 bank: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        side = size + 2 * pad
        self.bank = rng.integers(0, 256, size=(bank, side, side, 3), dtype=np.uint8)
        self.num_samples, self.size, self.pad, self.passes, self.read_s = num_samples, size, pad, passes, read_s
        self.classes, self.seed = classes, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        if self.read_s > 0:
            time.sleep(self.read_s)
        rng = np.random.default_rng((self.seed, index))
        image = self.bank[index % len(self.bank)]
        top, left = (int(v) for v in rng.integers(0, 2 * self.pad + 1, size=2))
        x = image[top:top + self.size, left:left + self.size].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            x = x[:, ::-1]
        x = x * rng.uniform(0.8, 1.2, size=3).astype(np.float32)  # brightness per channel
        x = (x - x.mean()) * np.float32(rng.uniform(0.8, 1.2)) + x.mean()  # contrast
        for _ in range(self.passes):
            x = x + rng.normal(0.0, 0.02, size=x.shape).astype(np.float32)
            padded = np.pad(x, ((1, 1), (1, 1), (0, 0)), mode="edge")
            x = sum(padded[i:i + self.size, j:j + self.size] for i in range(3) for j in range(3)) / np.float32(9)
        cy, cx = (int(v) for v in rng.integers(0, self.size, size=2))
        x[max(cy - 4, 0):cy + 4, max(cx - 4, 0):cx + 4] = 0.0  # cutout
        x = (np.clip(x, 0.0, 1.0) - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), index % self.classes


def augmented_images(num_samples: int = 4096, size: int = 32, pad: int = 4, passes: int = 3, read_s: float = 0.0,
                     classes: int = 10, bank: int = 512, seed: int = 0) -> AugmentedImages:
    return AugmentedImages(num_samples, size, pad, passes, read_s, classes, bank, seed)


class SmallCnn(torch.nn.Module):
    def __init__(self, classes: int, width: int, size: int) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(width, 2 * width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(2 * width * (size // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def make_cnn_step(device: str = "cpu", classes: int = 10, width: int = 16, size: int = 32, lr: float = 0.01,
                  momentum: float = 0.9, threads: int | None = None, seed: int = 0) -> Callable[[Any], None]:
    """A callable(batch) that trains the CNN one SGD step (with momentum) on (images, labels).
    `threads` sets torch's intra-op threads of the process that runs the step (None leaves
    torch's default, one per core), so every harness that builds the step runs it alike.
    The update is written out rather than taken from torch.optim, whose first use imports
    for seconds in a fresh process."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = SmallCnn(classes, width, size).to(device)
    model.train()
    params = list(model.parameters())
    velocity = [torch.zeros_like(p) for p in params]

    def step(batch: Any) -> None:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p, v in zip(params, velocity):
                v.mul_(momentum).add_(p.grad)
                p.add_(v, alpha=-lr)

    return step


def make_cpu_train_step(device: str = "cpu", classes: int = 10, width: int = 8, size: int = 32, lr: float = 0.01,
                        momentum: float = 0.9, seed: int = 0) -> Callable[[Any], None]:
    """make_cnn_step with torch's intra-op threads left as the process has them (by default one
    per core): a small model trained on the CPU beside the DataLoader's workers."""
    return make_cnn_step(device, classes, width, size, lr, momentum, None, seed)


HERE = Path(__file__).resolve().parent
EPOCH_BATCHES = 50  # as benchmarks/recommend.py: one epoch start in every window of 50 batches

PIPELINES: dict[str, dict[str, Any]] = {
    "cnn-threads": {
        "about": "small CNN trained on the CPU with torch's default intra-op threads per batch of 64; per sample "
                 "a 0.3 ms read wait and about 0.5 ms of numpy augmentation; baseline: DataLoader defaults",
        "dataset": {"factory": f"{HERE / 'pipelines.py'}:augmented_images",
                    "kwargs": {"num_samples": 64 * EPOCH_BATCHES, "passes": 2, "read_s": 0.0003}},
        "loader": {"batch_size": 64},
        "step": {"factory": f"{HERE / 'pipelines.py'}:make_cpu_train_step", "kwargs": {"width": 8}},
    },
}
