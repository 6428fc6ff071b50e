"""The evidence the pipeline model is fitted to: each measured trial's figures as the model reads
them from its record."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from loadtune.asked.trials import IDEAL, effective_settings
from loadtune.record.record import Record


@dataclass(frozen=True)
class LoadingTimes:
    """What a trial's loading showed: a fetch's time and the share of it that was CPU, the
    training thread's hand-over of a batch from a worker, and an epoch's wait for its first batch."""

    fetch_ms: float | None
    fetch_cpu_share: float | None
    handover_ms: float | None
    epoch_start_ms: float | None


@dataclass(frozen=True)
class Evidence:
    """One measured trial as the model reads it (a Record's evidence columns)."""

    settings: dict[str, Any]
    batch_size: int
    throughput: float
    wait_ratio: float | None
    step_ms: float | None
    h2d_ms: float
    main_cpu_util: float | None
    loading: LoadingTimes
    cores: float  # usable cores per rank
    ranks: int = 1

    @property
    def workers(self) -> int:
        return int(self.settings.get("num_workers") or 0)

    @property
    def period_ms(self) -> float:
        return 1e3 * self.batch_size / self.throughput


def evidence_of(record: Record) -> Evidence | None:
    """A measured record's evidence, or None when it did not run or lacks the figures."""
    if not record.ran or record.trial == IDEAL or record.data_flagged or not record.settings.batch_size \
            or not record.throughput or record.throughput <= 0:
        return None
    if record.watched and record.measuring.dist_rank is not None and (record.measuring.ranks or 1) > 1:
        return None  # one rank's own figures: evidence once the ranks are combined (watched.combine_ranks)
    cores = float(record.run.machine.cpu_count or 1)
    if record.run.machine.cpu_quota:
        cores = min(cores, float(record.run.machine.cpu_quota))
    # With ranks, each runs its own DataLoader on a share of the cores; throughput is their sum.
    ranks = max(int(record.measuring.ranks or 1), 1)
    settings = {k: record.column(k) for k in ("num_workers", "prefetch_factor", "persistent_workers",
                                                "pin_memory", "batch_size", "main_threads", "worker_threads")}
    judged = record.assessment
    loading = LoadingTimes(judged.fetch_ms, judged.fetch_cpu_share, judged.handover_ms, record.figures.epoch_start_ms)
    return Evidence(effective_settings(settings), int(record.settings.batch_size), float(record.throughput) / ranks,
                    record.wait_ratio, record.figures.step_ms, float(record.figures.h2d_ms or 0.0),
                    record.resources.main_cpu_util, loading,
                    max(cores, 1.0) / ranks, ranks)



def run_epoch_samples(records: Sequence[Record]) -> int | None:
    """Samples in one of the training run's epochs (per rank): from the epoch the records' figures
    weigh starts by (run_epoch_batches, in batches of each record's size), else the dataset's
    length (files written before that column)."""
    weighed = [r.measuring.run_epoch_batches * r.settings.batch_size for r in records
               if r.measuring.run_epoch_batches and r.settings.batch_size]
    if weighed:
        return int(statistics.median(weighed))
    return next((r.run.dataset_len for r in records if r.run.dataset_len), None)

