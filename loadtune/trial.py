"""Inside a trial's own process: build the dataset, DataLoader and step, then measure."""

from __future__ import annotations

import inspect
import itertools
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from loadtune.config import DatasetSpec, MeasureSpec, StepSpec
from loadtune.device import first_tensor_pinned, make_synced_step, make_transfer
from loadtune.factory import build_dataset, load_callable
from loadtune.measure import Measurement, measure_loop
from loadtune.plan import FEED_MEMORY, Trial

PARENT_POLL_S = 0.5


@dataclass(frozen=True)
class TrialJob:
    """Everything a trial process needs, picklable: the trial and how to build its parts."""

    trial: Trial
    dataset: DatasetSpec
    step: StepSpec
    measure: MeasureSpec
    device: str
    base_dir: str
    parent_pid: int
    start_method: str  # how DataLoader starts workers in the user's own process


def loader_kwargs(trial: Trial, base_dir: str) -> dict[str, Any]:
    """DataLoader keywords for a trial: specs turned into callables, unsupported defaults dropped."""
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    kwargs = {}
    for key, value in trial.loader_kwargs.items():
        if key in ("collate_fn", "worker_init_fn") and value is not None:
            value = load_callable(value, base_dir, f"loader.{key}")
        if key not in accepted:
            if key == "in_order" and value is True:
                continue  # older torch: always in order
            raise ValueError(f"this torch's DataLoader has no keyword {key!r}")
        kwargs[key] = value
    return kwargs


def execute(job: TrialJob) -> Measurement:
    from torch.utils.data import DataLoader

    from loadtune.steps import build_step

    dataset = build_dataset(job.dataset.factory, job.dataset.kwargs, job.base_dir)
    kwargs = loader_kwargs(job.trial, job.base_dir)
    step = make_synced_step(build_step(job.step, job.base_dir, job.device), job.device)
    pin = bool(kwargs.get("pin_memory"))
    transfer = make_transfer(job.device, pin)
    loader: Any
    if job.trial.feed == FEED_MEMORY:
        # The ideal: one batch, already on the device, handed over again and again.
        in_process = {**kwargs, "num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                      "multiprocessing_context": None}
        batch = next(iter(DataLoader(dataset, **in_process)))
        loader = itertools.repeat(transfer(batch) if transfer is not None else batch)
        transfer = None
    else:
        loader = DataLoader(dataset, **kwargs)
    seen_pinned: list[bool | None] = []
    if transfer is not None and pin:
        inner = transfer

        def transfer(batch: Any) -> Any:  # noqa: F811 - records pinning of the first batch only
            if not seen_pinned:
                seen_pinned.append(first_tensor_pinned(batch))
            return inner(batch)

    m = job.measure
    measurement = measure_loop(
        loader,
        step,
        warmup_batches=m.warmup_batches,
        batches=m.batches,
        repeats=m.repeats,
        epoch_batches=m.epoch_batches,
        transfer=transfer,
        default_batch_size=kwargs.get("batch_size") or 1,
    )
    del loader  # shut persistent workers down cleanly before the process ends
    if seen_pinned:
        measurement = Measurement(measurement.first_batch_s, measurement.windows, seen_pinned[0])
    return measurement


def describe(exc: BaseException) -> str:
    """One line for the CSV: the exception type and its most telling message line."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "Original Traceback" in text and lines:
        # An error re-raised from a DataLoader worker: the original error is the last line.
        worker = lines[0].rstrip(".")
        return f"{lines[-1]} ({worker[0].lower() + worker[1:]})"
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _exit_with_parent(parent_pid: int) -> None:
    """If the sweep itself dies, take this trial and its workers down too."""
    while True:
        time.sleep(PARENT_POLL_S)
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            os.killpg(0, signal.SIGKILL)
        except PermissionError:
            pass


def trial_main(job: TrialJob, conn: Any) -> None:
    """Entry point of the trial process: one message back, ('ok', Measurement) or ('failed', why)."""
    os.setpgrp()  # the trial and its DataLoader workers form one group, killed as one
    # This process came from the trial server; its workers must start the way they would in
    # the user's training script (fork on Linux before Python 3.14), not from that server.
    multiprocessing.set_start_method(job.start_method, force=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides what happens on Ctrl-C
    threading.Thread(target=_exit_with_parent, args=(job.parent_pid,), daemon=True).start()
    try:
        result: tuple[str, Any] = ("ok", execute(job))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row, not a crash
        result = ("failed", describe(exc))
    conn.send(result)
    conn.close()
