"""A plain training loop, timed: the neutral referee of benchmarks/recommend.py.

Reads a loadtune config for its dataset factory, loader baseline, step and measure block,
builds `torch.utils.data.DataLoader(dataset, **settings)` with the settings given on the
command line over the config's loader block, and runs what a training script runs: a new
iterator every `measure.epoch_batches` batches (or at the dataset's end), `next()` then the
step. The first `measure.warmup_batches` batches, and `measure.warmup_batches_per_worker`
(default 5) more for each worker within `measure.warmup_per_worker_max_s` (default 0.3 s;
none for workers that are not persistent when an epoch is no longer than the window), are
not counted; the next `measure.batches`
are, and it prints their samples per second as one JSON line. Nothing of loadtune is used.

With `--epochs N` it judges over whole epochs instead, as a training run sees them: the same
DataLoader, one whole epoch run uncounted (the workers' first start, the page cache warming),
then N whole epochs timed back to back, each from `iter(loader)` to its end with the step
after every batch, so every epoch start (and the restart of workers that are not persistent)
is in the time; `measure.epoch_batches` and the warm-up settings are not used.

No goal of its own: it is the referee recommend.py, repeatability.py, transfer.py and watch.py
judge with, and exits 0 once it has printed its line (non-zero when the loop raises).

    python benchmarks/plain_loop.py CONFIG.yaml '{"num_workers": 2, "prefetch_factor": 4}'
    python benchmarks/plain_loop.py CONFIG.yaml '{"num_workers": 2}' --epochs 3
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

WORKER_ONLY = ("prefetch_factor", "persistent_workers", "multiprocessing_context")
CALLABLE_KEYS = ("collate_fn", "worker_init_fn")


def load_callable(spec: str, base_dir: Path) -> Callable[..., Any]:
    """'pkg.module:callable', or 'path/file.py:callable' relative to `base_dir`."""
    module_part, _, attr = spec.rpartition(":")
    if module_part.endswith(".py") or "/" in module_part:
        file = Path(module_part)
        file = (file if file.is_absolute() else base_dir / file).resolve()
        # Import by its own name from its own folder, so its classes pickle into workers.
        if str(file.parent) not in sys.path:
            sys.path.insert(0, str(file.parent))
        module = sys.modules.get(file.stem)
        if module is None or Path(getattr(module, "__file__", "") or "").resolve() != file:
            module_spec = importlib.util.spec_from_file_location(file.stem, file)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[file.stem] = module
            module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_part)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def build_step(step: dict[str, Any], base_dir: Path) -> Callable[[Any], None]:
    if step.get("sleep_s") is not None:
        seconds = float(step["sleep_s"])
        return lambda batch: time.sleep(seconds)
    if step.get("busy_s") is not None:
        seconds = float(step["busy_s"])

        def busy(batch: Any) -> None:
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                pass

        return busy
    factory = load_callable(step["factory"], base_dir)
    kwargs = dict(step.get("kwargs") or {})
    if "device" in inspect.signature(factory).parameters and "device" not in kwargs:
        kwargs["device"] = "cpu"
    return factory(**kwargs)


def loader_kwargs(loader: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    kwargs = {**loader, **settings}
    if not kwargs.get("num_workers"):
        for key in WORKER_ONLY:
            kwargs.pop(key, None)
    return {k: v for k, v in kwargs.items() if v is not None}


def samples_in(batch: Any) -> int:
    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    return int(first.shape[0])


@dataclass
class Loop:
    """What a training script has: its DataLoader, its step, and the config's measure block."""

    loader: Any
    step: Callable[[Any], None]
    kwargs: dict[str, Any]
    measure: dict[str, Any]


def build(config_path: Path, settings: dict[str, Any]) -> Loop:
    from torch.utils.data import DataLoader

    config = yaml.safe_load(config_path.read_text())
    base_dir = config_path.parent
    dataset = load_callable(config["dataset"]["factory"], base_dir)(**(config["dataset"].get("kwargs") or {}))
    step = build_step(config["step"], base_dir)
    kwargs = loader_kwargs(dict(config.get("loader") or {}), settings)
    for key in CALLABLE_KEYS:  # "module:callable" or "file.py:callable", as loadtune imports them
        if isinstance(kwargs.get(key), str):
            kwargs[key] = load_callable(kwargs[key], base_dir)
    return Loop(DataLoader(dataset, **kwargs), step, kwargs, config.get("measure") or {})


def run(config_path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """`measure.batches` batches counted after the warm-up, a new iterator every `measure.epoch_batches`."""
    import torch

    built = build(config_path, settings)
    loader, step, kwargs, measure = built.loader, built.step, built.kwargs, built.measure
    warmup = max(int(measure.get("warmup_batches", 5)), 1)
    # The sweep's warm-up (docs/reference.md, measure.warmup_batches_per_worker): a few batches more for
    # each worker, whose first batches come slower, for at most warmup_per_worker_max_s.
    extra = int(measure.get("warmup_batches_per_worker", 5)) * int(kwargs.get("num_workers") or 0)
    extra_max_s = float(measure.get("warmup_per_worker_max_s", 0.3))
    batches = int(measure.get("batches", 50))
    epoch_batches = measure.get("epoch_batches")
    # No extra batches for workers started again every epoch when an epoch is no longer than the window.
    try:
        epoch = len(loader)
    except TypeError:
        epoch = None
    if epoch_batches is not None:
        epoch = epoch_batches if epoch is None else min(epoch, epoch_batches)
    if not kwargs.get("persistent_workers") and epoch is not None and epoch <= batches:
        extra = 0

    it, in_epoch = None, 0

    def next_batch() -> Any:
        nonlocal it, in_epoch
        if it is None or in_epoch == epoch_batches:
            it = None  # the old iterator shuts its workers down, as a training loop's would
            it, in_epoch = iter(loader), 0
        try:
            batch = next(it)
        except StopIteration:
            it, in_epoch = iter(loader), 0
            batch = next(it)
        in_epoch += 1
        return batch

    for _ in range(warmup):
        step(next_batch())
    settle_from = time.perf_counter()
    for _ in range(extra):
        if time.perf_counter() - settle_from >= extra_max_s:
            break
        step(next_batch())
    samples = 0
    start = time.perf_counter()
    for _ in range(batches):
        batch = next_batch()
        step(batch)
        samples += samples_in(batch)
    seconds = time.perf_counter() - start
    return {"samples_per_s": samples / seconds, "seconds": seconds, "batches": batches,
            "torch_threads": torch.get_num_threads(), "loader": {k: v for k, v in kwargs.items()}}


def run_epochs(config_path: Path, settings: dict[str, Any], epochs: int) -> dict[str, Any]:
    """One whole epoch uncounted, then `epochs` whole epochs timed back to back, epoch starts included."""
    import torch

    built = build(config_path, settings)
    loader, step = built.loader, built.step
    for batch in loader:  # the workers' first start and the page cache warming: not counted
        step(batch)
    samples = batches = 0
    start = time.perf_counter()
    for _ in range(epochs):
        # A new iterator each epoch, run to its end: workers that are not persistent shut down at
        # the end of one epoch and start again at the next, inside the time, as in training.
        for batch in loader:
            step(batch)
            samples += samples_in(batch)
            batches += 1
    seconds = time.perf_counter() - start
    return {"samples_per_s": samples / seconds, "seconds": seconds, "batches": batches, "epochs": epochs,
            "torch_threads": torch.get_num_threads(), "loader": dict(built.kwargs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="a loadtune config (YAML)")
    parser.add_argument("settings", type=json.loads, help="DataLoader settings over the config's loader block, "
                                                          "as a JSON object")
    parser.add_argument("--epochs", type=int, default=None,
                        help="time this many whole epochs after one uncounted, instead of measure.batches")
    args = parser.parse_args()
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be 1 or more")
    config = args.config.resolve()
    result = run(config, args.settings) if args.epochs is None else run_epochs(config, args.settings, args.epochs)
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
