"""Build every user part once, before any trial, as a trial builds them: a factory that raises,
hangs or crashes stops the sweep with one clear error instead of failing every row."""

from __future__ import annotations

import dataclasses
from typing import Any

from loadtune.asked.config import adopt_loader
from loadtune.core.errors import ConfigError, LoadtuneError
from loadtune.parts.factory import build_source
from loadtune.parts.loader import loader_kwargs
from loadtune.trial_process.jobs import PreflightInfo, PreflightJob


def run_preflight(job: PreflightJob) -> PreflightInfo:
    """The preflight's result, or the error that stops the sweep (its kind says which)."""
    try:
        return preflight(job)
    except ConfigError as exc:
        return PreflightInfo(error=str(exc), error_kind="config")
    except LoadtuneError as exc:
        return PreflightInfo(error=str(exc), error_kind="factory")


def preflight(job: PreflightJob) -> PreflightInfo:
    """Dataset, loader specs and step built as a trial builds them; one batch fetched in this
    process, to know what a batch weighs in shared memory."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    from loadtune.measure.loop import batch_bytes
    from loadtune.measure.machine import gpu_name
    from loadtune.parts.device import resolve_device
    from loadtune.parts.factory import dataset_length
    from loadtune.parts.steps import build_step

    device = resolve_device(job.device)
    if job.ranks > 1:
        from loadtune.trial_process.ranks import join_single

        join_single()  # parts written for ranks may ask for their rank, or wrap a model in DDP
    source = build_source(job.dataset.factory, job.dataset.kwargs, job.base_dir)
    dataset = source.dataset
    baseline = job.baseline
    if source.settings and job.loader is not None:
        adopted = adopt_loader(job.loader, source.settings, f"{job.config_path}: loader")
        baseline = dataclasses.replace(baseline, settings=tuple(sorted(adopted.model_dump().items())))
    kwargs = baseline.loader_kwargs
    if isinstance(dataset, IterableDataset) and kwargs.get("shuffle"):
        raise ConfigError(f"{job.config_path}: loader.shuffle = True: DataLoader cannot shuffle an "
                          f"IterableDataset ({job.dataset.factory}); set shuffle: false")
    loaded = loader_kwargs(baseline, job.base_dir, parts=source.parts)
    build_step(job.step, job.base_dir, device)
    in_process = {k: v for k, v in loaded.items() if k not in ("worker_init_fn", "multiprocessing_context")}
    in_process.update(num_workers=0, prefetch_factor=None, persistent_workers=False, pin_memory=False)
    try:
        first = next(iter(DataLoader(dataset, **in_process)), _NO_BATCH)
    except Exception:  # noqa: BLE001 - a failing sample is each trial's row to report, with its index
        first = _NO_BATCH
    return PreflightInfo(dataset_len=dataset_length(dataset),
                         batch_bytes=None if first is _NO_BATCH else batch_bytes(first),
                         source_kind=source.kind, source_settings=source.settings or None,
                         iterable=isinstance(dataset, IterableDataset),
                         stable_bytes=None if first is _NO_BATCH else stable_bytes(dataset, in_process),
                         device=device, cuda_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
                         # a plain str: torch's own version type would import torch where unpickled
                         torch_version=str(torch.__version__), gpu=gpu_name())


# A map-style dataset's first samples read twice to tell whether its bytes are stable: random
# augmentation changes every sample, so a few show it as well as a whole batch.
STABLE_CHECK_SAMPLES = 8


def stable_bytes(dataset: Any, kwargs: dict[str, Any]) -> bool | None:
    """Whether the first batch, read twice (the first STABLE_CHECK_SAMPLES samples of a
    map-style dataset, whatever its sampler; the start of a stream), holds the same bytes: the
    sample keys can then tell samples apart across trials. False where samples change from one
    read to the next (random augmentation); None where it cannot be told (no per-sample tensor,
    no batch)."""
    from torch.utils.data import DataLoader, IterableDataset, default_collate

    from loadtune.measure.fingerprint import sample_keys
    from loadtune.measure.loop import batch_len

    size = kwargs.get("batch_size")

    def read() -> Any:
        if isinstance(dataset, IterableDataset) or not size:
            return next(iter(DataLoader(dataset, **{**kwargs, "shuffle": False})), _NO_BATCH)
        samples = []
        for index in range(min(size, STABLE_CHECK_SAMPLES)):
            try:
                samples.append(dataset[index])
            except IndexError:
                break
        return (kwargs.get("collate_fn") or default_collate)(samples) if samples else _NO_BATCH

    found = []
    for _ in range(2):
        try:
            batch = read()
        except Exception:  # noqa: BLE001 - as above: the trials report it
            return None
        if batch is _NO_BATCH:
            return None
        keys, _ = sample_keys(batch, batch_len(batch, size or 1))
        if keys is None:
            return None
        found.append(keys)
    return len(found[0]) == len(found[1]) and bool((found[0] == found[1]).all())


_NO_BATCH = object()
