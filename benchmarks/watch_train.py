"""A training run, as a user writes it: the DataLoader and step of a loadtune config (built as
benchmarks/plain_loop.py builds them), one whole epoch uncounted, then `--epochs` whole epochs
timed, each `for batch in loader: step(batch)`. With `--watch OUT` the loader is wrapped in
`loadtune.watch(loader, out=OUT, every_s=EVERY)` and nothing else changes. Prints one JSON line:
the timed epochs' samples per second.

No goal of its own: the training run watch.py times; exits 0 once it has printed its line.

    python benchmarks/watch_train.py CONFIG.yaml '{"num_workers": 2}' --epochs 4 [--watch OUT --every 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from plain_loop import build, samples_in  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("settings", type=json.loads)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--watch", type=Path, default=None, help="watch the loader, its rows to this CSV")
    parser.add_argument("--every", type=float, default=60.0, help="the watch's interval, in seconds")
    args = parser.parse_args()
    built = build(args.config.resolve(), args.settings)
    loader, step = built.loader, built.step
    if args.watch is not None:
        import loadtune

        loader = loadtune.watch(loader, out=args.watch, every_s=args.every, name="train")
    for batch in loader:  # the workers' first start, the page cache: not timed (the watch drops its warm-up)
        step(batch)
    samples = batches = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            step(batch)
            samples += samples_in(batch)
            batches += 1
    seconds = time.perf_counter() - start
    print(json.dumps({"samples_per_s": samples / seconds, "seconds": seconds, "batches": batches,
                      "watched": args.watch is not None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
