"""Inside a trial's own process: build the dataset, DataLoader and step, then measure."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import multiprocessing
import os
import re
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from loadtune.config import DatasetSpec, MeasureSpec, StepSpec
from loadtune.errors import ConfigError, LoadtuneError
from loadtune.device import first_tensor_pinned, make_synced_step, make_transfer
from loadtune.factory import build_dataset, load_callable
from loadtune.measure import EmptyLoaderError, Measurement, measure_loop
from loadtune.plan import FEED_MEMORY, Trial

PARENT_POLL_S = 0.5
# Told to the sweep process, which samples this process tree meanwhile (see run.run_isolated).
COUNTED_START = "counted-start"  # at the warm-up: start sampling
SAMPLING = "sampling"  # the answer: the first reading is taken, the counted windows may start
COUNTED_END = "counted-end"  # after the counted windows; answered with the same once sampling stopped
ACK_TIMEOUT_S = 10.0
_channel: Any = None  # the pipe to the sweep process, in a trial process


def _send_start(main_pids: tuple[int, ...] = ()) -> float:
    """Tell the sweep to start sampling, without waiting: the warm-up runs on meanwhile (a
    pause would let the workers fill the queue and flatter the window). `main_pids` are the
    ranks' processes, each a training loop's main process. Returns when it was sent."""
    if _channel is not None:
        try:
            _channel.send((COUNTED_START, main_pids))
        except (OSError, ValueError):
            pass
    return time.monotonic()


def _sampling_ready(asked_at: float) -> bool:
    """Whether the sweep's first reading is done (or it is not answering), checked between
    warm-up batches without blocking."""
    if _channel is None or time.monotonic() - asked_at > ACK_TIMEOUT_S:
        return True
    try:
        if _channel.poll(0):
            _channel.recv()  # SAMPLING: the only message sent before COUNTED_END's answer
            return True
    except (OSError, EOFError, ValueError):
        return True
    return False


def _tell_end() -> None:
    """Tell the sweep the counted windows are over and wait until it has taken its last
    sample, before the workers are torn down."""
    if _channel is None:
        return
    try:
        _channel.send(COUNTED_END)
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while _channel.poll(max(0.0, deadline - time.monotonic())):
            if _channel.recv() == COUNTED_END:  # a late SAMPLING answer is passed over
                return
    except (OSError, EOFError, ValueError):
        pass


# Prefix of the note added to an exception raised while loading a sample or collating a batch;
# it travels inside the traceback text of an error re-raised from a DataLoader worker.
NOTE_PREFIX = "[loadtune] "
# What a death by these signals usually means.
SIGNAL_HINTS = {
    "SIGKILL": "out of memory? the kernel's OOM killer sends SIGKILL",
    "SIGBUS": "/dev/shm may be too small for the batches workers share (Docker's default is 64 MB)",
}


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
    ranks: int = 1  # data-parallel ranks run at once (see loadtune.ranks)
    group: Any = None  # ranks.GroupSpec: this process is one rank of a sweep run under torchrun
    scratch: str | None = None  # a folder for files the trial leaves, removed by the sweep

    @property
    def name(self) -> str:
        return f"trial {self.trial.name}"

    def run(self) -> Measurement:
        return execute(self)


@dataclass(frozen=True)
class PreflightInfo:
    """What the sweep learns by building the user's parts once: or the error that stops it."""

    dataset_len: int | None = None
    batch_bytes: int | None = None
    error: str | None = None
    error_kind: str | None = None  # "config" or "factory"


@dataclass(frozen=True)
class PreflightJob:
    """Build every user part once, in a process of its own, before any trial: a factory that
    raises, hangs or crashes stops the sweep with a clear error instead of failing every row."""

    dataset: DatasetSpec
    baseline: Trial
    step: StepSpec
    device: str
    base_dir: str
    config_path: str
    parent_pid: int
    start_method: str
    ranks: int = 1

    @property
    def name(self) -> str:
        return "preflight"

    def run(self) -> PreflightInfo:
        try:
            return preflight(self)
        except ConfigError as exc:
            return PreflightInfo(error=str(exc), error_kind="config")
        except LoadtuneError as exc:
            return PreflightInfo(error=str(exc), error_kind="factory")


def preflight(job: PreflightJob) -> PreflightInfo:
    """Dataset, loader specs and step built as a trial builds them; one batch fetched in this
    process, to know what a batch weighs in shared memory."""
    from torch.utils.data import DataLoader, IterableDataset

    from loadtune.factory import dataset_length
    from loadtune.resources import batch_bytes
    from loadtune.steps import build_step

    if job.ranks > 1:
        from loadtune.ranks import join_single

        join_single()  # parts written for ranks may ask for their rank, or wrap a model in DDP
    dataset = build_dataset(job.dataset.factory, job.dataset.kwargs, job.base_dir)
    kwargs = job.baseline.loader_kwargs
    if isinstance(dataset, IterableDataset) and kwargs.get("shuffle"):
        raise ConfigError(f"{job.config_path}: loader.shuffle = True: DataLoader cannot shuffle an "
                          f"IterableDataset ({job.dataset.factory}); set shuffle: false")
    loaded = loader_kwargs(job.baseline, job.base_dir)
    build_step(job.step, job.base_dir, job.device)
    in_process = {k: v for k, v in loaded.items() if k not in ("worker_init_fn", "multiprocessing_context")}
    in_process.update(num_workers=0, prefetch_factor=None, persistent_workers=False, pin_memory=False)
    try:
        first = next(iter(DataLoader(dataset, **in_process)), _NO_BATCH)
    except Exception:  # noqa: BLE001 - a failing sample is each trial's row to report, with its index
        first = _NO_BATCH
    return PreflightInfo(dataset_len=dataset_length(dataset),
                         batch_bytes=None if first is _NO_BATCH else batch_bytes(first))


_NO_BATCH = object()


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
    if kwargs.get("num_workers"):
        # Workers started with spawn or forkserver do not inherit the annotated fetch.
        kwargs["worker_init_fn"] = functools.partial(_init_worker, kwargs.get("worker_init_fn"))
    return kwargs


def _init_worker(user_init: Callable[[int], Any] | None, worker_id: int) -> None:
    install_fetch_notes()
    if user_init is not None:
        user_init(worker_id)


def _indices_text(indices: Sequence[Any]) -> str:
    items = list(indices)
    if len(items) <= 4:
        return f"[{', '.join(map(str, items))}]"
    return f"[{items[0]}, {items[1]}, ..., {items[-1]}] ({len(items)} indices)"


def _note(exc: BaseException, text: str) -> None:
    note = NOTE_PREFIX + text
    if hasattr(exc, "add_note"):  # Python 3.11+: the note is printed with the traceback
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]


def _annotated_fetch(self: Any, possibly_batched_index: Any) -> Any:
    """torch's _MapDatasetFetcher.fetch, the same steps, with the failing index noted on the
    error. A `try` costs nothing until it raises; the loop runs as many calls as before."""
    dataset = self.dataset
    if self.auto_collation:
        if hasattr(dataset, "__getitems__") and dataset.__getitems__:
            try:
                data = dataset.__getitems__(possibly_batched_index)
            except Exception as exc:
                _note(exc, f"at dataset indices {_indices_text(possibly_batched_index)} (__getitems__)")
                raise
        else:
            data = []
            for idx in possibly_batched_index:
                try:
                    data.append(dataset[idx])
                except Exception as exc:
                    _note(exc, f"at dataset index {idx}")
                    raise
    else:
        try:
            data = dataset[possibly_batched_index]
        except Exception as exc:
            _note(exc, f"at dataset index {possibly_batched_index}")
            raise
    try:
        return self.collate_fn(data)
    except Exception as exc:
        what = _indices_text(possibly_batched_index) if self.auto_collation else possibly_batched_index
        _note(exc, f"in collate_fn, batch of dataset indices {what}")
        raise


def install_fetch_notes() -> None:
    """Make map-style fetches in this process name the index at which the dataset failed."""
    try:
        from torch.utils.data._utils import fetch
    except ImportError:  # a torch without this private module: errors just lack the index
        return
    fetcher = getattr(fetch, "_MapDatasetFetcher", None)
    if fetcher is not None and fetcher.fetch is not _annotated_fetch:
        fetcher.fetch = _annotated_fetch


def execute(job: TrialJob) -> Measurement:
    """The trial, measured: in this process, or on job.ranks data-parallel ranks at once."""
    if job.group is not None:
        from loadtune.ranks import in_group

        with in_group(job.device, job.measure.timeout_s, job.group) as context:
            return execute_rank(job, context)
    if job.ranks > 1:
        from loadtune.measure import combine_ranks
        from loadtune.ranks import launch

        return combine_ranks(launch(job))
    return execute_rank(job, None)


def execute_rank(job: TrialJob, rank: Any) -> Measurement:
    """The trial in this process; `rank` is its RankContext when it is one of several ranks."""
    started = time.perf_counter()
    install_fetch_notes()
    dataset = build_dataset(job.dataset.factory, job.dataset.kwargs, job.base_dir)
    kwargs = loader_kwargs(job.trial, job.base_dir)
    try:
        return _execute(job, dataset, kwargs, started, rank)
    except EmptyLoaderError as exc:
        raise EmptyLoaderError(_empty_reason(dataset, kwargs, str(exc), rank.world_size if rank else 1)) from None


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


class _Epochs:
    """A DataLoader whose DistributedSampler is told each new epoch, so shuffles differ."""

    def __init__(self, loader: Any, sampler: Any) -> None:
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def __iter__(self) -> Any:
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)


def _execute(job: TrialJob, dataset: Any, kwargs: dict[str, Any], started: float, rank: Any) -> Measurement:
    from torch.utils.data import DataLoader

    from loadtune.steps import build_step

    device = rank.device if rank is not None else job.device
    step = build_step(job.step, job.base_dir, device)
    if rank is not None:
        step = rank.synced_step(step)
        kwargs = rank.shard(dataset, kwargs)
    step = make_synced_step(step, device)
    pin = bool(kwargs.get("pin_memory"))
    transfer = make_transfer(device, pin)
    copy_timer = transfer.copy_s if transfer is not None else None
    loader: Any
    if job.trial.feed == FEED_MEMORY:
        # The ideal: one batch, already on the device, handed over again and again.
        in_process = {**kwargs, "num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                      "multiprocessing_context": None}
        in_process.pop("worker_init_fn", None)
        batch = next(iter(DataLoader(dataset, **in_process)), _NO_BATCH)
        if batch is _NO_BATCH:
            raise EmptyLoaderError("the DataLoader yielded no batch in a whole epoch")
        loader = itertools.repeat(transfer(batch) if transfer is not None else batch)
        transfer = copy_timer = None
    else:
        loader = DataLoader(dataset, **kwargs)
        if hasattr(kwargs.get("sampler"), "set_epoch"):
            loader = _Epochs(loader, kwargs["sampler"])
    seen_pinned: list[bool | None] = []
    if transfer is not None:
        inner = transfer

        def transfer(batch: Any) -> Any:  # noqa: F811 - records pinning of the first batch only
            if not seen_pinned:
                seen_pinned.append(first_tensor_pinned(batch))
            return inner(batch)

    m = job.measure
    # The sweep process samples this process tree (this process with its pin-memory thread,
    # and the workers) while the counted batches run; not for the ideal, which has no workers.
    # With ranks, rank 0 tells it, and every rank waits for the answers.
    sampled = job.trial.feed != FEED_MEMORY
    # Ranks launched here are main processes of this tree; under torchrun each rank's tree
    # (on its own host, perhaps) is its own, and only rank 0's is sampled.
    main_pids = tuple(rank.gather_pids()) if rank is not None and sampled and job.group is None else ()
    reporter = rank is None or rank.reporter
    asked: list[float] = []

    def start() -> None:
        asked.append(_send_start(main_pids) if reporter else time.monotonic())

    def ready() -> bool:
        local = _sampling_ready(asked[0]) if reporter else True
        return rank.agree(local) if rank is not None else local

    def end() -> None:
        if reporter:
            _tell_end()
        if rank is not None:
            rank.barrier()  # no rank tears its workers down before the last sample

    setup_s = time.perf_counter() - started
    measurement = measure_loop(
        loader,
        step,
        warmup_batches=m.warmup_batches,
        batches=m.batches,
        repeats=m.repeats,
        epoch_batches=m.epoch_batches,
        transfer=transfer,
        default_batch_size=kwargs.get("batch_size") or 1,
        on_sampling_start=start if sampled else None,
        on_sampling_end=end if sampled else None,
        sampling_ready=ready if sampled else None,
        copy_timer=copy_timer,
    )
    measurement = dataclasses.replace(measurement, setup_s=setup_s)
    del loader  # shut persistent workers down cleanly before the process ends
    if seen_pinned:
        measurement = dataclasses.replace(measurement, pinned=seen_pinned[0])
    return measurement


_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.\n]+)")
_CAUGHT = re.compile(r"^Caught \S+ ")


def signal_text(signum: int) -> str:
    """A signal as a reason: 'SIGSEGV (Segmentation fault)', with what it usually means."""
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}"
    text = f"{sig.name} ({signal.strsignal(sig)})" if signal.strsignal(sig) else sig.name
    hint = SIGNAL_HINTS.get(sig.name)
    return f"{text}; {hint}" if hint else text


def _signal_named(description: str) -> int | None:
    for sig in signal.Signals:
        if signal.strsignal(sig) == description:
            return int(sig)
    return None


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a user exception whose __str__ fails
        return ""


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _worker_death(exc: BaseException) -> str | None:
    """'DataLoader worker (pid N) killed by SIGSEGV (...)' when a worker died of a signal.

    torch's SIGCHLD handler names the signal in an error that its "worker exited unexpectedly"
    error chains; without it, the dead workers' exit codes are read off the traceback."""
    chain = _chain(exc)
    for link in chain:
        found = _WORKER_KILLED.search(_text(link))
        if found:
            pid, description = found.group(1), found.group(2).strip()
            signum = _signal_named(description)
            what = signal_text(signum) if signum is not None else description
            return f"DataLoader worker (pid {pid}) killed by {what}"
    for link in chain:
        tb = link.__traceback__
        while tb is not None:
            failed = tb.tb_frame.f_locals.get("failed_workers")
            codes = [(w.pid, w.exitcode) for w in failed or ()
                     if isinstance(getattr(w, "exitcode", None), int)]
            if codes:
                how = [f"pid {pid} killed by {signal_text(-code)}" if code < 0 else f"pid {pid} exit code {code}"
                       for pid, code in codes]
                first = next((ln.strip() for ln in _text(exc).splitlines() if ln.strip()), "")
                return f"{type(exc).__name__}: {first} ({'; '.join(how)})"
            tb = tb.tb_next
    return None


def _from_worker(text: str) -> tuple[str, list[str], str]:
    """An error re-raised from a worker ('Caught X in DataLoader worker process N.' and the
    worker's traceback): the original error line, loadtune's notes, and where it happened."""
    lines = text.splitlines()
    where = _CAUGHT.sub("", lines[0].strip().rstrip("."))
    body = lines[1:]
    frames = [i for i, ln in enumerate(body) if ln.startswith('  File "')]
    i = frames[-1] + 1 if frames else 0
    while i < len(body) and body[i].startswith("    "):  # the frame's source line and ^^^ marks
        i += 1
    rest = [ln.strip() for ln in body[i:] if ln.strip()]
    notes = [ln[len(NOTE_PREFIX):] for ln in rest if ln.startswith(NOTE_PREFIX)]
    error = next((ln for ln in rest if not ln.startswith(NOTE_PREFIX)), lines[0].strip())
    return error, notes, where


def describe(exc: BaseException) -> str:
    """One line for the CSV: the exception type, its most telling message line, and where it
    happened when known (the dataset index, the worker); a worker's death names the signal."""
    try:
        if getattr(exc, "reason_as_is", False):  # already a whole reason (ranks.RankFailedError)
            return _text(exc)
        death = _worker_death(exc)
        if death:
            return death
        text = _text(exc)
        if "Original Traceback" in text:
            error, notes, where = _from_worker(text)
            extra = [*notes, where]
        else:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
            extra = [n[len(NOTE_PREFIX):] for n in getattr(exc, "__notes__", None) or ()
                     if isinstance(n, str) and n.startswith(NOTE_PREFIX)]
        return f"{error} ({', '.join(extra)})" if extra else error
    except Exception:  # noqa: BLE001 - describing a failure must not fail
        return type(exc).__name__


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """State and start time of a process from /proc, None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _parent_alive(parent_pid: int, started: str | None) -> bool:
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # that pid now belongs to another user's process
    stat = _proc_stat(parent_pid)
    if stat is None:
        return True
    state, start = stat
    # A dead sweep not yet reaped by its own parent is a zombie; a reused pid starts later.
    return state not in ("Z", "X") and (started is None or start == started)


def _kill_own_tree() -> None:
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):  # also those in other groups
            try:
                child.kill()
            except psutil.Error:
                pass
    except Exception:  # noqa: BLE001 - the group kill below is what matters
        pass
    os.killpg(0, signal.SIGKILL)


def _exit_with_parent(parent_pid: int) -> None:
    """If the sweep itself dies, take this trial and its workers down too."""
    stat = _proc_stat(parent_pid)
    started = stat[1] if stat else None
    while True:
        time.sleep(PARENT_POLL_S)
        if not _parent_alive(parent_pid, started):
            _kill_own_tree()


def trial_main(job: TrialJob | PreflightJob, conn: Any) -> None:
    """Entry point of the trial process: one message back, ('ok', result) or ('failed', why),
    after COUNTED_START / COUNTED_END notes for the sampler."""
    global _channel
    _channel = conn
    os.setpgrp()  # the trial and its DataLoader workers form one group, killed as one
    # This process came from the trial server; its workers must start the way they would in
    # the user's training script (fork on Linux before Python 3.14), not from that server.
    multiprocessing.set_start_method(job.start_method, force=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides what happens on Ctrl-C
    # The sweep warns once about workers beyond the cores; DataLoader's own warning would
    # repeat in every trial process.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    threading.Thread(target=_exit_with_parent, args=(job.parent_pid,), daemon=True).start()
    try:
        result: tuple[str, Any] = ("ok", job.run())
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row, not a crash
        result = ("failed", describe(exc))
    try:
        conn.send(result)
        conn.close()
    except (OSError, ValueError):  # the sweep stopped waiting (interrupted): nobody to tell
        pass
