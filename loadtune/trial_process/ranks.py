"""Data-parallel ranks: a trial run by N processes at once, each with its own DataLoader.

Inside a trial process, `launch` starts the ranks with torch.distributed's elastic launcher
(the machinery behind torchrun): N processes, each with RANK, WORLD_SIZE and a rendezvous
in its environment. Each rank joins a process group (gloo on CPU, nccl on CUDA), shards the
dataset with a DistributedSampler, and runs the trial's measured loop; every step ends with
an all_reduce of a small tensor, so a rank waits for the slowest as it would under DDP.
`RankContext` is what the measured loop needs to know of its rank. A rank that fails writes
why to a file and exits; the launcher then stops the others and the trial fails with that
reason, naming the rank.

Each rank also tells the trial process its phase (see phases): a rank that stalls is named with
its phase and Python stack, the ranks are stopped, and the trial fails with that one line; a
stall before the first batch is tried once more, on a fresh rendezvous, first.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, cast

from loadtune.core.errors import LoadtuneError
from loadtune.parts.failures import SIGNAL_HINTS, describe, signal_text
from loadtune.trial_process.jobs import TrialJob
from loadtune.trial_process.phases import PhaseBoard, RankPhases, Stall, StallLimits, StallWatch

# How often the launcher checks on its ranks: also how fast a failing rank stops the others.
MONITOR_INTERVAL_S = 0.05
# The launcher gives ranks this long to stop after SIGTERM before SIGKILL.
SHUTDOWN_TIMEOUT_S = 5
# How gloo says that the rank at the other end went away: a consequence, not a cause.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Read error", "Broken pipe")
# What each rank runs: the trial in its process, given its place in the group.
MeasureRank = Callable[[TrialJob, "RankContext"], Any]


def peer_gone(text: str) -> bool:
    return any(mark in text for mark in PEER_GONE)


class RankFailedError(LoadtuneError):
    """One rank of a trial failed; the message names the rank and why."""

    reason_as_is = True  # the trial's reason is the message itself


@dataclass(frozen=True)
class GroupSpec:
    """Where a trial process finds the other ranks when the sweep itself runs under torchrun:
    a TCPStore kept by rank 0's sweep process, and a key of its own for each trial run."""

    rank: int
    world_size: int
    local_rank: int
    host: str
    port: int
    key: str


@dataclass(frozen=True)
class RankContext:
    """One rank's place in the group, and the collective operations the loop uses."""

    rank: int
    world_size: int
    local_rank: int
    device: str
    phases: RankPhases | None = None  # told this rank's phases and waits, in a launch of ranks

    @property
    def reporter(self) -> bool:
        """Rank 0 tells the sweep when sampling starts and ends."""
        return self.rank == 0

    def _flag(self, value: float) -> Any:
        import torch

        return torch.tensor([value], dtype=torch.float32, device=self.device)

    def shard(self, dataset: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """DataLoader keywords with a DistributedSampler giving this rank its share of a
        map-style dataset (shuffle moves into the sampler). An IterableDataset is left as it
        is: it shards itself, as with DDP."""
        from torch.utils.data import IterableDataset
        from torch.utils.data.distributed import DistributedSampler

        if isinstance(dataset, IterableDataset) or kwargs.get("sampler") is not None \
                or kwargs.get("batch_sampler") is not None:
            return kwargs
        kwargs = dict(kwargs)
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank,
                                     shuffle=bool(kwargs.pop("shuffle", False)))
        kwargs["sampler"] = sampler
        return kwargs

    def synced_step(self, step: Callable[[Any], None]) -> Callable[[Any], None]:
        """The step, then an all_reduce of a one-element tensor: the ranks leave each step
        together, as DDP's gradient all_reduce makes them."""
        import torch.distributed as dist

        tensor = self._flag(1.0)
        phases = self.phases

        def step_and_reduce(batch: Any) -> None:
            step(batch)
            tensor.fill_(1.0)
            if phases is None:
                dist.all_reduce(tensor)
                return
            phases.wait_start()
            dist.all_reduce(tensor)
            phases.wait_end()

        return step_and_reduce

    def waiting(self) -> ContextManager[None]:
        """Around a wait for the other ranks (or for the sweep): not this rank's own stall."""
        return self.phases.waiting() if self.phases is not None else nullcontext()

    def agree(self, ready: bool) -> bool:
        """True on every rank only when it is True on every rank."""
        import torch.distributed as dist

        flag = self._flag(0.0 if ready else 1.0)
        with self.waiting():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return float(flag.item()) == 0.0

    def gather_pids(self) -> list[int]:
        import torch.distributed as dist

        pids: list[Any] = [None] * self.world_size
        with self.waiting():
            dist.all_gather_object(pids, os.getpid())
        return [int(p) for p in pids]

    def barrier(self) -> None:
        import torch.distributed as dist

        with self.waiting():
            dist.barrier()


def rank_device(device: str, local_rank: int) -> str:
    """Each rank on a host uses its own accelerator: cuda:LOCAL_RANK."""
    return f"cuda:{local_rank}" if device.startswith("cuda") else device


def join_group(device: str, timeout_s: float, group: GroupSpec | None = None,
               phases: RankPhases | None = None) -> RankContext:
    """Join the process group of a trial's ranks: the one the launcher's environment describes
    (RANK, WORLD_SIZE, MASTER_ADDR, ...), or, given `group`, the one met in its store; `phases`
    is told the rendezvous (and that joining waits for the other ranks)."""
    if phases is not None:
        phases.enter("rendezvous")
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=max(timeout_s, 1.0))
    if group is not None:
        rank, world, local = group.rank, group.world_size, group.local_rank
        tcp = dist.TCPStore(group.host, group.port, is_master=False, timeout=timeout)  # type: ignore[attr-defined]
        store = dist.PrefixStore(group.key, tcp)  # type: ignore[attr-defined]
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        store = None
    device = rank_device(device, local)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    backend = "nccl" if device.startswith("cuda") else "gloo"
    device_id = torch.device(device) if backend == "nccl" else None
    with phases.waiting() if phases is not None else nullcontext():
        if store is not None:
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout,
                                    device_id=device_id)
        else:
            dist.init_process_group(backend, timeout=timeout, device_id=device_id)
    return RankContext(rank, world, local, device, phases)


def join_single() -> None:
    """A process group of this process alone (gloo), for building parts written for ranks
    outside a launch: rank 0 of 1."""
    import torch.distributed as dist

    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        os.environ.setdefault(name, value)
    if not dist.is_initialized():
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def leave_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - leaving must not hide the result
        pass


@contextmanager
def in_group(device: str, timeout_s: float, group: GroupSpec | None = None,
             phases: RankPhases | None = None) -> Iterator[RankContext]:
    """This process as one rank of a group (see join_group), left at the end of the block."""
    context = join_group(device, timeout_s, group, phases)
    try:
        yield context
    finally:
        leave_group()


def _rank_file(folder: str, rank: int, kind: str) -> Path:
    """rank<N>.<kind> in the launch's folder: `started` when a rank begins, `error` why it failed,
    `stack` its threads' stacks when the trial process asks (see phases)."""
    return Path(folder) / f"rank{rank}.{kind}"


def rank_main(job: TrialJob, errors: str, measure_rank: MeasureRank, board: PhaseBoard | None = None) -> Any:
    """One rank's whole life: join, measure, leave. On failure, why goes to a file (before the
    group is left, which would fail the others first) and the rank exits with code 1, so the
    launcher stops the others at once. Its phases go to `board`, read by the trial process."""
    import signal

    import torch

    rank = int(os.environ.get("RANK", -1))
    # The launcher's own SIGTERM handler, inherited through fork, would raise inside DataLoader
    # teardown when the launcher stops this rank; torchrun also gives each rank one thread.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    phases = RankPhases(board, rank) if board is not None and 0 <= rank < board.ranks else None
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    try:
        _rank_file(errors, rank, "started").touch()
    except OSError:
        pass
    try:
        with in_group(job.device, job.measure.timeout_s, phases=phases) as context:
            try:
                result = measure_rank(job, context)
            except BaseException as exc:
                _write_error(errors, rank, describe(exc))
                raise
            if phases is not None and phases.phase != "teardown":
                phases.enter("teardown")  # leaving the group, and the process's exit
    except BaseException as exc:  # noqa: BLE001 - told to the trial through the file
        _write_error(errors, rank, describe(exc))
        raise SystemExit(1) from None
    if phases is not None:
        phases.returned()
    return result


def _write_error(folder: str, rank: int, text: str) -> None:
    path = _rank_file(folder, rank, "error")
    if path.exists():
        return
    try:
        path.write_text(f"{time.time():.6f} {text}")
    except OSError:
        pass


def _quiet_launcher() -> None:
    """The launcher logs every start and failure; the trial's row says what matters."""
    for name in ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing.spawn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _errors(folder: str) -> list[tuple[bool, float, int, str]]:
    """(peer gone?, when, rank, why) from the ranks' error files."""
    found = []
    for path in Path(folder).glob("rank*.error"):
        try:
            stamp, _, text = path.read_text().partition(" ")
            found.append((peer_gone(text), float(stamp), int(path.stem[4:]), text.strip()))
        except (OSError, ValueError):  # written as the rank was killed: treated as silent
            continue
    return sorted(found)


def _ranks_with(folder: str, kind: str) -> set[int]:
    ranks = set()
    for path in Path(folder).glob(f"rank*.{kind}"):
        try:
            ranks.add(int(path.stem[4:]))
        except ValueError:
            continue
    return ranks


def _failure_reason(exc: BaseException, errors: str) -> str:
    """Which rank failed first, and why: a rank's own error, unless that error only says a
    peer went away; then the rank that died without a word (a signal, os._exit), if any."""
    found = _errors(errors)
    if found and not found[0][0]:
        return f"rank {found[0][2]} failed: {found[0][3]}"
    silent = sorted(_ranks_with(errors, "started") - {rank for _, _, rank, _ in found})
    codes = {getattr(f, "local_rank", getattr(f, "rank", None)): getattr(f, "exitcode", None)
             for f in (getattr(exc, "failures", {}) or {}).values()}
    if silent:
        # The launcher reports the first rank it saw fail; the others it stopped itself.
        rank = min(silent, key=lambda r: (r not in codes, r))
        code = codes.get(rank)
        if isinstance(code, int) and code < 0:
            return f"rank {rank} killed by {signal_text(-code)}"
        how = f" (exit code {code})" if isinstance(code, int) and code > 0 else ""
        return (f"rank {rank} died without a Python error{how}: killed by a signal, or os._exit? "
                f"{SIGNAL_HINTS['SIGKILL']}")
    if found:
        return f"rank {found[0][2]} failed: {found[0][3]}"
    for failed, code in codes.items():
        if isinstance(code, int) and code < 0:
            return f"rank {failed} killed by {signal_text(-code)}"
        return f"rank {failed} exited with code {code}"
    return f"the ranks failed: {type(exc).__name__}: {exc}".strip()


_NO_NUMA_CHECK = object()


def launch_config(ranks: int, folder: str) -> Any:
    """The launcher's settings: `ranks` forked processes on this host, a rendezvous on a free
    local port, no restarts, its files in `folder`. Building it must not touch CUDA (see
    numa_options), or CUDA would be unusable in the forked ranks."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=ranks, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=MONITOR_INTERVAL_S, start_method="fork",
                          signals_to_handle="SIGTERM", shutdown_timeout=SHUTDOWN_TIMEOUT_S,
                          logs_specs=DefaultLogsSpecs(log_dir=folder),
                          # Not None: else the config asks the accelerator for its device count
                          # to choose NUMA bindings. Set back to None (no binding) at once.
                          numa_options=cast(Any, _NO_NUMA_CHECK))
    config.numa_options = None
    return config


# A stall before the first batch is tried this many times more, each on a fresh rendezvous.
STALL_RETRIES = 1


class _Stalled(Exception):
    """One launch stopped by the stall watch; whether rank 0 had asked the sweep to sample."""

    def __init__(self, stall: Stall, sampling_started: bool) -> None:
        super().__init__()
        self.stall, self.sampling_started = stall, sampling_started


def launch(job: TrialJob, measure_rank: MeasureRank, before_retry: Callable[[bool], None] | None = None) -> list[Any]:
    """Run `job` on job.ranks ranks on this host, `measure_rank` in each; their results in rank order.

    Ranks are forked from this (trial) process, which has torch and the user's modules
    loaded already; the rendezvous is on a free local port. Any rank failing fails all. A rank
    that stalls (see phases) fails all too, named with its phase and stack; when that happens
    before the first batch, the ranks are launched once more, afresh (a new rendezvous, port
    and folder), after `before_retry(rank 0 had started the sweep's sampling)`."""
    _quiet_launcher()
    limits = StallLimits.for_timeout(job.measure.timeout_s)
    for attempt in range(STALL_RETRIES + 1):
        try:
            return _launch_once(job, measure_rank, limits)
        except _Stalled as stalled:
            retried = attempt > 0
            if attempt < STALL_RETRIES and stalled.stall.found.before_first_batch:
                if stalled.stall.full:  # no reason will name it
                    Path(stalled.stall.full).unlink(missing_ok=True)
                if before_retry is not None:
                    before_retry(stalled.sampling_started)
                continue
            raise RankFailedError(stalled.stall.reason(retried)) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _launch_once(job: TrialJob, measure_rank: MeasureRank, limits: StallLimits) -> list[Any]:
    from torch.distributed.launcher.api import elastic_launch

    # In the sweep's scratch folder: a trial killed at its timeout cannot clean up after itself.
    with tempfile.TemporaryDirectory(prefix="loadtune-ranks-", dir=job.scratch) as errors:
        config = launch_config(job.ranks, errors)
        board = PhaseBoard(job.ranks, errors)
        watch = StallWatch(board, limits)
        try:
            with watch:
                results = elastic_launch(config, rank_main)(job, errors, measure_rank, board)
        except Exception as exc:  # noqa: BLE001 - ChildFailedError, or the launcher's own
            if watch.stall is not None:
                raise _Stalled(watch.stall, board.reached(0, "warm-up")) from None
            raise RankFailedError(_failure_reason(exc, errors)) from None
    return [results[r] for r in sorted(results)]

