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

    python benchmarks/plain_loop.py CONFIG.yaml '{"num_workers": 2, "prefetch_factor": 4}'
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

WORKER_ONLY = ("prefetch_factor", "persistent_workers", "multiprocessing_context")


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


def run(config_path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    config = yaml.safe_load(config_path.read_text())
    base_dir = config_path.parent
    dataset = load_callable(config["dataset"]["factory"], base_dir)(**(config["dataset"].get("kwargs") or {}))
    step = build_step(config["step"], base_dir)
    measure = config.get("measure") or {}
    kwargs = loader_kwargs(dict(config.get("loader") or {}), settings)
    warmup = max(int(measure.get("warmup_batches", 5)), 1)
    # The sweep's warm-up (docs/reference.md, measure.warmup_batches_per_worker): a few batches more for
    # each worker, whose first batches come slower, for at most warmup_per_worker_max_s.
    extra = int(measure.get("warmup_batches_per_worker", 5)) * int(kwargs.get("num_workers") or 0)
    extra_max_s = float(measure.get("warmup_per_worker_max_s", 0.3))
    batches = int(measure.get("batches", 50))
    epoch_batches = measure.get("epoch_batches")
    loader = DataLoader(dataset, **kwargs)
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


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    result = run(Path(sys.argv[1]).resolve(), json.loads(sys.argv[2]))
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
