"""examples/train_demo.py's training, its DataLoader tuned while it trains (docs/tune.md): the
one change is `loader = loadtune.tune(loader)`.

    python examples/train_tuned.py --epochs 3
    python examples/train_tuned.py --epochs 3 --budget 30 --out results/tuned.csv
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader

import loadtune
from loadtune.demo import synthetic_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds the tuning may take (budget_s)")
    parser.add_argument("--out", default=None, help="the run's rows (default results/watch-train_tuned.csv)")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = synthetic_images(num_images=args.images, crop_px=64, min_px=96, max_px=192)
    loader = loadtune.tune(DataLoader(data, batch_size=32, shuffle=True), out=args.out, budget_s=args.budget,
                           name="train")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        total = 0.0
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels % 10)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch + 1}: loss {total / len(loader):.3f}")
    print(f"trained {args.epochs} epochs in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
