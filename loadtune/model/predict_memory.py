"""A config's memory on another machine (`loadtune predict`): what the measured rows say each
rank's process and workers take, and whether a config fits the target's RAM and /dev/shm."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from loadtune.asked.trials import effective_settings
from loadtune.model.predict_values import Memory, ResolvedTarget
from loadtune.record.record import Record

# Memory: the share of the target's RAM a config may plan to use (the rest is the training
# process's model, the OS, page cache), and how many times over its batches in flight must
# fit /dev/shm (a batch that does not fit kills its worker with SIGBUS).
RAM_HEADROOM = 0.8
SHM_MARGIN = 1.5
MB_PER_GB = 1024.0


@dataclass(frozen=True)
class MemoryModel:
    """Memory per rank, from the measured rows: the training process, each worker, each
    worker's copy-on-read growth per batch the loader delivers, and a batch's bytes."""

    main_mb: float | None
    worker_mb: float | None
    growth_mb_per_batch: float  # per worker, per batch the rank's loader delivered
    batch_mb_per_sample: float
    dataset_len: int | None
    scale: float

    def need(self, settings: Mapping[str, Any], ranks: int, scale: float) -> tuple[float | None, float]:
        """(RAM GB, /dev/shm GB) of the whole machine for a config after one epoch at `scale`."""
        s = effective_settings(settings)
        workers, batch = int(s["num_workers"] or 0), int(s["batch_size"] or 1)
        prefetch = int(s["prefetch_factor"] or 0)
        shm = self.batch_mb_per_sample * batch * workers * (prefetch + 1) * ranks / MB_PER_GB
        if self.main_mb is None:
            return None, shm
        # Ranks split the data (DistributedSampler): each rank's workers read its share.
        epoch = (self.dataset_len or 0) * scale / self.scale / batch / ranks
        per_worker = (self.worker_mb or 0.0) + self.growth_mb_per_batch * epoch
        return ranks * (self.main_mb + workers * per_worker) / MB_PER_GB, shm


def memory_model(rows: Sequence[Record]) -> MemoryModel:
    """The memory model of measured rows (predict.measured_rows)."""
    mains: list[float] = []
    worker_pss: list[float] = []
    growths: list[float] = []
    batch: list[float] = []
    for r in rows:
        if r.resources.peak_pss_mb is None:
            continue
        ranks = max(int(r.measuring.ranks or 1), 1)
        mains.append(r.resources.peak_pss_mb / ranks
                     - (r.settings.num_workers or 0) * (r.resources.worker_pss_mb or 0.0))
        if not r.settings.num_workers or r.resources.worker_pss_mb is None:
            continue
        worker_pss.append(r.resources.worker_pss_mb)
        if r.resources.pss_growth_mb is not None and r.measuring.batches:
            growths.append(max(0.0, r.resources.pss_growth_mb) / (r.settings.num_workers * ranks) / r.measuring.batches)
        # shm_need_mb counts every rank's workers.
        if r.resources.shm_need_mb is not None and r.settings.batch_size:
            queued = r.settings.num_workers * ranks * ((r.settings.prefetch_factor or 2) + 1) * r.settings.batch_size
            batch.append(r.resources.shm_need_mb / queued)
    worker_mb = statistics.median(worker_pss) if worker_pss else None
    main_mb = max(0.0, statistics.median(mains)) if mains else None
    first = next(iter(rows), None)
    return MemoryModel(main_mb, worker_mb, statistics.median(growths) if growths else 0.0,
                       statistics.median(batch) if batch else 0.0, first.run.dataset_len if first else None,
                       float(first.run.scale or 1.0) if first else 1.0)


def memory_there(need: tuple[float | None, float], target: ResolvedTarget) -> Memory:
    """A config's need (MemoryModel.need) set against the target's RAM and /dev/shm."""
    ram, shm = need
    why = []
    if ram is not None and target.ram_gb is not None and ram > RAM_HEADROOM * target.ram_gb:
        why.append(f"needs {ram:.1f} GB of RAM, over {RAM_HEADROOM:.0%} of {target.ram_gb:g} GB")
    if target.shm_gb is not None and shm * SHM_MARGIN > target.shm_gb:
        why.append(f"needs {shm * MB_PER_GB:.0f} MB of /dev/shm ({SHM_MARGIN:g}x over), the target has "
                   f"{target.shm_gb * MB_PER_GB:.0f} MB")
    return Memory(ram, shm, not why, "; ".join(why) or None)
