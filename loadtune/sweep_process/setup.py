"""Before anything is measured: every user part built once (preflight), the DataLoader the
factory returned adopted as the baseline, the machine read (cores, /dev/shm, how busy), and
the columns every row of this sweep shares."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from loadtune.asked.config import RunSpec, adopt_loader
from loadtune.asked.options import SweepOptions
from loadtune.asked.plan import baseline_trial
from loadtune.asked.trials import Trial
from loadtune.core.errors import ConfigError, FactoryError
from loadtune.core.kinds import Status
from loadtune.measure.diagnose import machine_busy_now
from loadtune.measure.machine import cpu_quota, fingerprint, shm_free_gb, usable_cores
from loadtune.measure.resources import shm_fits, shm_need_mb
from loadtune.parts.device import is_accelerator
from loadtune.sweep_process import events
from loadtune.sweep_process.launch import preload, run_in_trial_process
from loadtune.sweep_process.torchrun import local_ranks
from loadtune.trial_process.jobs import PreflightInfo, PreflightJob

# How long the machine's load is sampled before the first trial, to warn when it is busy already.
BUSY_WATCH_S = 0.25
# The first build of a dataset may fill a cache (download, decode, generate): allowed this long
# at least, whatever measure.timeout_s says about a trial.
PREFLIGHT_MIN_TIMEOUT_S = 600.0
# Read /dev/shm's free space now (the default), or not check it (None), or take a figure (MB).
MEASURE_SHM = "measure"


@dataclass(frozen=True)
class Setup:
    """The sweep's config (with the factory's DataLoader adopted), what preflight found, and the
    machine it runs on."""

    spec: RunSpec
    info: PreflightInfo
    device: str  # as resolved: cpu, cuda:0, ...
    cores: int  # usable cores
    effective_cores: float  # usable cores within the CPU quota
    host_ranks: int  # ranks on this host, sharing its cores, /dev/shm and GPUs
    shm_free_mb: float | None
    context: dict[str, Any]  # the machine and run columns every record shares

    @property
    def accelerator(self) -> bool:
        return is_accelerator(self.device)

    @property
    def sampled_cores(self) -> float:
        """Cores the sampled process tree's figures are against: under torchrun only rank 0's tree
        is sampled, against its share."""
        return self.effective_cores / self.host_ranks if self.spec.torchrun else self.effective_cores

    def shm_check(self, trial: Trial) -> str | None:
        return shm_refusal(trial, self.info.batch_bytes, self.shm_free_mb, self.host_ranks)


def prepare(options: SweepOptions, spec: RunSpec, on_event: events.OnEvent,
            shm_free_mb: float | None | str = MEASURE_SHM) -> Setup:
    cfg = spec.config
    host_ranks = local_ranks() if spec.torchrun else spec.ranks
    specs = (cfg.dataset.factory, cfg.step.factory, cfg.loader.callables.collate_fn)
    preload([s for s in specs if s], str(spec.base_dir))
    info = preflight(spec, cfg.device)
    check_ranks(host_ranks, info.device, info.cuda_count)
    spec = adopt_source(spec, info)
    cores = usable_cores()
    quota = cpu_quota()
    effective_cores = min(cores, quota) if quota else cores
    busy = machine_busy_now(BUSY_WATCH_S, effective_cores)
    if busy is not None and busy > cfg.measure.max_outside_cpu:
        on_event(events.Notice(f"the machine is busy before the first trial: other processes use {busy:.0%} of the "
                               f"{effective_cores:g} usable cores; repeats they disturb are measured again, but the "
                               "figures are best on a quiet machine: close other programs, or wait"))
    if shm_free_mb == MEASURE_SHM:
        free_gb = shm_free_gb()
        shm_free_mb = free_gb * 1024 if free_gb is not None else None
    context = {
        **fingerprint(info.torch_version, info.gpu),
        "config_name": spec.name,
        "config_sha": spec.sha,
        "dataset_len": info.dataset_len,
        "scale": spec.scale,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": info.device,
        "strategy": str(options.strategy),
        "ranks": spec.ranks,
    }
    free = shm_free_mb if not isinstance(shm_free_mb, str) else None
    return Setup(spec, info, info.device, cores, effective_cores, host_ranks, free, context)


def preflight(spec: RunSpec, device: str) -> PreflightInfo:  # device as asked: auto, cpu, cuda, cuda:I
    """Build every user part once, in a process of its own with a timeout (the longer of
    measure.timeout_s and PREFLIGHT_MIN_TIMEOUT_S), so a broken factory stops the sweep with a
    clear error before any trial, not as a failed row per trial."""
    cfg = spec.config
    job = PreflightJob(cfg.dataset, baseline_trial(cfg), cfg.step, device, str(spec.base_dir), str(spec.path),
                       os.getpid(), multiprocessing.get_start_method(), spec.ranks, cfg.loader)
    timeout_s = max(cfg.measure.timeout_s, PREFLIGHT_MIN_TIMEOUT_S)
    outcome = run_in_trial_process(job, timeout_s)
    where = f"dataset factory {cfg.dataset.factory!r}"
    if outcome.status == Status.TIMEOUT:
        raise FactoryError(f"{where}: building the dataset and step took longer than {timeout_s:g}s "
                           "(the longer of measure.timeout_s and the time allowed to fill caches)")
    if outcome.result is None:
        raise FactoryError(f"{where}: {outcome.reason}")
    info: PreflightInfo = outcome.result
    if info.error is not None:
        raise (ConfigError if info.error_kind == "config" else FactoryError)(info.error)
    return info


def adopt_source(spec: RunSpec, info: PreflightInfo) -> RunSpec:
    """When the dataset factory built a DataLoader (or a data module did), its settings are the
    baseline, with what the config's loader block sets on top; swept keys change from there."""
    if not info.source_settings:
        return spec
    loader = adopt_loader(spec.config.loader, info.source_settings, f"{spec.path}: loader")
    return dataclasses.replace(spec, config=spec.config.model_copy(update={"loader": loader}),
                               source=info.source_kind)


def check_ranks(ranks: int, device: str, count: int) -> None:
    """Each rank on an accelerator needs a device of its own (`count` CUDA devices here)."""
    if ranks > 1 and is_accelerator(device):
        if ranks > count:
            raise ConfigError(f"--ranks {ranks} on {device}: each rank uses a CUDA device of its own and "
                              f"this machine has {count}; use --ranks {count} or fewer, or --device cpu")


def shm_refusal(trial: Trial, batch_bytes: int | None, free_mb: float | None, ranks: int = 1) -> str | None:
    """Why a trial would not fit in /dev/shm (its workers would die of SIGBUS), or None.
    With ranks, each rank's workers hold their own batches in flight."""
    if trial.skipped or not batch_bytes or free_mb is None:
        return None
    kwargs = trial.loader_kwargs
    need = shm_need_mb(batch_bytes, kwargs.get("num_workers", 0), kwargs.get("prefetch_factor")) * ranks
    if shm_fits(need, free_mb):
        return None
    return (f"/dev/shm too small: batches in flight need about {need:.0f} MB "
            f"({batch_bytes / 2**20:.1f} MB per batch) and {free_mb:.0f} MB is free; "
            "give the container more (docker --shm-size) or use fewer workers or a smaller prefetch_factor")


