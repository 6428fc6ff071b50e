"""A trial, measured in this process: its dataset, DataLoader, step and transfer built, then
the measured loop run while the sweep samples this process tree. With data-parallel ranks,
each rank runs the same here."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable

from loadtune.asked.config import WORKER_ONLY
from loadtune.asked.trials import FEED_MEMORY
from loadtune.measure.loop import EmptyLoaderError, measure_loop
from loadtune.parts.device import first_tensor_pinned, make_synced_step, make_transfer
from loadtune.parts.factory import build_source
from loadtune.parts.fetch_notes import WindowEdges, count_fetches, fetch_counters, install_fetch_notes
from loadtune.parts.loader import EpochPlan, Epochs, apply_main_threads, epoch_plan, loader_kwargs
from loadtune.parts.steps import build_step
from loadtune.record.measurement import Behind, LoaderEpochs, Measurement, combine_ranks
from loadtune.trial_process.channel import SweepChannel
from loadtune.trial_process.jobs import TrialJob
from loadtune.trial_process.ranks import RankContext, in_group, launch
from loadtune.trial_process.sampled import IndexRecorder, recording


def measure_trial(job: TrialJob, channel: SweepChannel) -> Measurement:
    """The trial, measured: in this process, or on job.ranks data-parallel ranks at once
    (launched from here), or as this sweep's rank of a trial run under torchrun."""
    if job.group is not None:
        with in_group(job.device, job.measure.timeout_s, job.group) as context:
            return measure_here(job, context, channel)
    if job.ranks > 1:
        return combine_ranks(launch(job, functools.partial(measure_here, channel=channel),
                                    before_retry=functools.partial(_sampling_over, channel)))
    return measure_here(job, None, channel)


def _sampling_over(channel: SweepChannel, started: bool) -> None:
    """Before ranks stalled at their start are launched again: if rank 0 had asked the sweep to
    sample (its first batch was in), the sweep stops that sampler; the new ranks ask again."""
    if started:
        channel.end_sampling()


def measure_here(job: TrialJob, rank: RankContext | None, channel: SweepChannel) -> Measurement:
    """The trial in this process; `rank` is its place in the group when it is one of several."""
    started = time.perf_counter()
    phases = rank.phases if rank is not None else None
    if phases is not None:
        phases.enter("setup")
    install_fetch_notes()
    source = build_source(job.dataset.factory, job.dataset.kwargs, job.base_dir)
    dataset = source.dataset
    workers = job.trial.loader_kwargs.get("num_workers", 0)
    counters = fetch_counters(workers, job.start_method)
    count_fetches(counters, workers)  # the training process's own fetches, without workers
    kwargs = loader_kwargs(job.trial, job.base_dir, counters, source.parts)
    try:
        parts = _build(job, dataset, kwargs, rank)
        loading = job.trial.feed != FEED_MEMORY
        late = rank is None and _forked(kwargs, job.start_method)  # torn down after the result is sent
        sampling = _Sampling(channel, rank, job, late) if loading else None
        setup_s = time.perf_counter() - started
        m = job.measure
        plan = epoch_plan(parts.loader, m.epoch_batches, parts.recorder is not None) if loading \
            else EpochPlan(None, None)
        if parts.recorder is not None:
            parts.recorder.cut = plan.sampler_cut
        # Without a loader (the ideal) no worker starts: no warm-up for workers.
        extra = m.extra_warmup_for(workers, bool(kwargs.get("persistent_workers")), plan.window_batches) \
            if loading else 0
        measurement = measure_loop(
            parts.loader, parts.step, warmup_batches=m.warmup_batches, batches=m.batches, repeats=m.repeats,
            epoch_batches=plan.feed_cut, transfer=parts.transfer, default_batch_size=parts.batch_size,
            sampling=sampling, copy_timer=parts.copy_timer, probe=WindowEdges(counters, workers) if loading else None,
            fingerprint=job.trial.feed != FEED_MEMORY, extra_warmup_batches=extra,
            extra_warmup_max_s=m.warmup_per_worker_max_s, on_phase=phases.enter if phases is not None else None,
            behind=_behind(job, plan) if rank is None else None, keep=channel.hold if late else None)
    except EmptyLoaderError as exc:
        raise EmptyLoaderError(_empty_reason(dataset, kwargs, str(exc), rank.world_size if rank else 1)) from None
    pinned = parts.transfer.pinned if isinstance(parts.transfer, _PinProbe) else None
    sampled = parts.recorder.epochs() if parts.recorder is not None else ()
    if late:
        channel.hold(parts.loader)  # its workers stop once the result is sent (SweepChannel.hold)
    parts.close()  # else: its workers stop cleanly here
    epochs = LoaderEpochs(sampled, dataset_batches=plan.dataset_batches, window_epoch_batches=plan.window_batches,
                          restarts_workers=bool(workers) and not kwargs.get("persistent_workers"))
    return dataclasses.replace(measurement, start=dataclasses.replace(measurement.start, setup_s=setup_s),
                               pinned=pinned, epochs=epochs)


def _forked(kwargs: dict[str, Any], start_method: str) -> bool:
    """Whether the loader's workers (if any) are forked and pass batches as file descriptors: then
    nothing of theirs outlives the tree, which the sweep may end as soon as it has the result.
    Spawned or forkserver workers register their queues' semaphores with the sweep's resource
    tracker, so they stop cleanly first."""
    import torch.multiprocessing

    context = kwargs.get("multiprocessing_context")
    method = context if isinstance(context, str) else \
        context.get_start_method() if context is not None else start_method
    # With the file_system strategy, torch_shm_manager unlinks the batches' shared memory once the
    # tree is gone: ended while batches are held, it would leave them in /dev/shm.
    shared = torch.multiprocessing.get_sharing_strategy() == "file_descriptor"  # type: ignore[no-untyped-call]
    return not kwargs.get("num_workers") or (method == "fork" and shared)


def _behind(job: TrialJob, plan: EpochPlan) -> Behind | None:
    """When the window ends early (racing): as the sweep asked, the waits of each epoch's first
    half of places left out of the best case unless the windows hold the run's epochs whole."""
    if job.behind is None:
        return None
    whole = plan.window_batches is not None and plan.window_batches == (job.measure.run_epoch_batches
                                                                        or plan.dataset_batches)
    return job.behind if whole else dataclasses.replace(job.behind,
                                                         early_places=max(1, (plan.window_batches or 0) // 2))


class _PinProbe:
    """A transfer that notes whether the first batch it moved was pinned."""

    def __init__(self, transfer: Callable[[Any], Any]) -> None:
        self.transfer = transfer
        self.pinned: bool | None = None
        self.seen = False

    def __call__(self, batch: Any) -> Any:
        if not self.seen:
            self.seen, self.pinned = True, first_tensor_pinned(batch)
        return self.transfer(batch)


@dataclass
class _Parts:
    loader: Any
    step: Callable[[Any], None]
    transfer: Callable[[Any], Any] | None
    copy_timer: Callable[[], float | None] | None
    batch_size: int
    recorder: IndexRecorder | None = None  # the indices the sampler hands out (map-style datasets)

    def close(self) -> None:
        self.loader = None


def _build(job: TrialJob, dataset: Any, kwargs: dict[str, Any], rank: RankContext | None) -> _Parts:
    """The step (joined with the other ranks' when there are some), the transfer to the device,
    and the loader: the DataLoader (recording the indices its sampler hands out, for a map-style
    dataset), or for the ideal one batch on the device, again and again."""
    from torch.utils.data import DataLoader

    device = rank.device if rank is not None else job.device
    apply_main_threads(job.trial.loader_kwargs.get("main_threads"))
    step = build_step(job.step, job.base_dir, device)
    if rank is not None:
        step = rank.synced_step(step)
        kwargs = rank.shard(dataset, kwargs)
    step = make_synced_step(step, device)
    transfer = make_transfer(device, bool(kwargs.get("pin_memory")))
    batch_size = kwargs.get("batch_size") or 1
    if job.trial.feed == FEED_MEMORY:
        in_process = {**kwargs, **{k: v for k, v in WORKER_ONLY.items() if k in kwargs}, "num_workers": 0}
        in_process.pop("worker_init_fn", None)
        batch = next(iter(DataLoader(dataset, **in_process)), _NO_BATCH)
        if batch is _NO_BATCH:
            raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch")
        on_device = transfer(batch) if transfer is not None else batch
        return _Parts(itertools.repeat(on_device), step, None, None, batch_size)
    sampler = kwargs.get("sampler")
    recorded, recorder = recording(dataset, kwargs)
    loader: Any = DataLoader(dataset, **recorded)
    if hasattr(sampler, "set_epoch"):
        loader = Epochs(loader, sampler)
    probe = _PinProbe(transfer) if transfer is not None else None
    return _Parts(loader, step, probe, transfer.copy_s if transfer is not None else None, batch_size, recorder)


_NO_BATCH = object()


class _Sampling:
    """The sweep samples this process tree (this process with its pin-memory thread, and the
    workers) while the counted batches run. With ranks, rank 0 tells it, and every rank waits
    for the answers; ranks launched here are main processes of this tree, while under torchrun
    each rank's tree (on its own host, perhaps) is its own and only rank 0's is sampled."""

    def __init__(self, channel: SweepChannel, rank: RankContext | None, job: TrialJob, late: bool = False) -> None:
        self.channel, self.rank, self.late = channel, rank, late
        self.reporter = rank is None or rank.reporter
        self.main_pids = tuple(rank.gather_pids()) if rank is not None and job.group is None else ()

    def start(self) -> None:
        if self.reporter:
            self.channel.start_sampling(self.main_pids)

    def ready(self, settled: bool) -> bool:
        local = settled and (self.channel.sampling_ready() if self.reporter else True)
        return self.rank.agree(local) if self.rank is not None else local

    def end(self) -> None:
        if self.late:
            self.channel.end_sampling(wait=False)  # the workers are held until the sweep has its answer
        elif self.reporter:
            with self.rank.waiting() if self.rank is not None else contextlib.nullcontext():
                self.channel.end_sampling()  # waits for the sweep (ACK_TIMEOUT_S at most)
        if self.rank is not None:
            self.rank.barrier()  # no rank tears its workers down before the last sample


def _empty_reason(dataset: Any, kwargs: dict[str, Any], fallback: str, ranks: int = 1) -> str:
    """Why a DataLoader yielded nothing, in the trial's own numbers when they are known."""
    try:
        length = len(dataset)
    except Exception:  # noqa: BLE001 - an iterable dataset without a length
        return fallback
    batch_size = kwargs.get("batch_size", 1)
    if length == 0:
        return "the dataset is empty (len 0): the DataLoader yields no batch"
    share = -(-length // ranks)  # DistributedSampler's share of each rank, padded
    if kwargs.get("drop_last") and batch_size is not None and batch_size > share:
        if ranks > 1:
            return (f"batch_size={batch_size} is larger than each rank's share of the dataset ({share} of its "
                    f"{length} samples over {ranks} ranks) and drop_last=true drops the only, incomplete batch: "
                    "the DataLoader yields no batch; use a smaller batch_size or fewer ranks")
        return (f"batch_size={batch_size} is larger than the dataset (len {length}) and drop_last=true "
                "drops the only, incomplete batch: the DataLoader yields no batch")
    return fallback
