"""examples/train_demo.py's training, its DataLoader tuned while it trains (docs/tune.md): the
one change is `loader = loadtune.tune(loader)`.

    python examples/train_tuned.py --epochs 3
    python examples/train_tuned.py --epochs 3 --budget 30 --out results/tuned.csv
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader
from train_demo import dataset, train  # the same folder: the same training, untuned

import loadtune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds the tuning may take (budget_s)")
    parser.add_argument("--out", default=None, help="the run's rows (default results/watch-train_tuned.csv)")
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = loadtune.tune(DataLoader(dataset(args.images), batch_size=32, shuffle=True), out=args.out,
                           budget_s=args.budget, name="train")
    train(loader, args.epochs)

if __name__ == "__main__":
    main()
