"""A small training script, as a user writes it: the demo's JPEGs (loadtune.demo) decoded and
augmented in the DataLoader, a tiny CNN trained on the CPU. Nothing of loadtune in it:

    python examples/train_demo.py --epochs 3                     # trains
    loadtune watch examples/train_demo.py --epochs 3             # the same run, watched
    loadtune watch --out results/demo-run.csv examples/train_demo.py --epochs 3 --workers 2 --persistent

docs/watch.md walks through one such run.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Iterable

import torch
from torch.utils.data import DataLoader

from loadtune.demo import synthetic_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--prefetch", type=int, default=None, help="prefetch_factor (with workers)")
    parser.add_argument("--persistent", action="store_true", help="persistent_workers=True (with workers)")
    parser.add_argument("--threads", type=int, default=None, help="torch's threads for the step (default: torch's)")
    parser.add_argument("--images", type=int, default=1000)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = dataset(args.images)
    more = {"prefetch_factor": args.prefetch, "persistent_workers": args.persistent} if args.workers else {}
    train(DataLoader(data, batch_size=32, shuffle=True, num_workers=args.workers, **more), args.epochs)


def dataset(images: int) -> Any:
    """The demo's JPEGs, decoded, cropped and flipped in the DataLoader."""
    return synthetic_images(num_images=images, crop_px=64, min_px=96, max_px=192)


def train(loader: Iterable[Any], epochs: int) -> None:
    """A tiny CNN trained on the CPU over `epochs` epochs of `loader`, a line an epoch."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for epoch in range(epochs):
        total, batches = 0.0, 0
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels % 10)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        print(f"epoch {epoch + 1}: loss {total / batches:.3f}")
    print(f"trained {epochs} epochs in {time.perf_counter() - start:.1f} s")

if __name__ == "__main__":
    main()
