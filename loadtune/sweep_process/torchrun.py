"""A sweep run under torchrun: every launched process is one rank of every trial.

`torchrun --nproc_per_node N [--nnodes M ...] -m loadtune sweep CONFIG` starts the sweep
once per rank. Rank 0 plans the trials, ranks them and writes the CSV; for each trial run
it tells the other ranks which job to run (over a gloo group of the sweep processes), and
every rank runs it at the same time in an isolated trial process of its own. The trial
processes meet through a TCPStore kept by rank 0's sweep, under a key of their own for
each run, and form the trial's process group there. Each rank sends its outcome back to
rank 0, which combines them like `--ranks`. When one rank's part fails, it marks the run
failed in the store and the others stop theirs instead of waiting on a collective.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from datetime import timedelta
from typing import Any

from loadtune.core.errors import ConfigError, LoadtuneError
from loadtune.core.kinds import Status
from loadtune.record.measurement import combine_ranks
from loadtune.sweep_process.launch import STOPPED_BY_PEER, Outcome, run_in_trial_process
from loadtune.trial_process.ranks import peer_gone

# The sweep processes wait on each other while trials run: allow for a long trial.
CONTROL_TIMEOUT_S = 3600.0
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_RUN, _STOP = "run", "stop"


class LaunchError(LoadtuneError):
    """The processes torchrun started cannot form their group."""


def local_ranks() -> int:
    """Ranks on this host: LOCAL_WORLD_SIZE under torchrun, else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1))) if launched() else 1


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher setting its
    environment) as one of several ranks."""
    return all(name in os.environ for name in _ENV) and int(os.environ["WORLD_SIZE"]) > 1


class Cluster:
    """The sweep processes of one torchrun launch. Rank 0 calls `run_on_every_rank` for each trial run and
    `close` at the end; the other ranks call `follow`, which returns when rank 0 closes."""

    def __init__(self, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        import torch.distributed as dist

        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.host = os.environ["MASTER_ADDR"]
        timeout = timedelta(seconds=timeout_s)
        if os.environ["MASTER_PORT"] == "0":
            raise LaunchError("torchrun: MASTER_PORT=0 cannot be met by the other ranks; use --standalone "
                              "or a real --master_port")
        try:
            dist.init_process_group("gloo", timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - told as one line, naming the launcher's settings
            raise LaunchError(f"torchrun rank {self.rank} of {self.world_size}: cannot reach the other ranks at "
                              f"{self.host}:{os.environ['MASTER_PORT']}: {type(exc).__name__}: {exc}") from None
        # The trials' own meeting place, beside the one torchrun set up for the sweeps.
        store: Any = dist.TCPStore  # type: ignore[attr-defined]
        self._store: Any = store(self.host, 0, is_master=True, wait_for_workers=False, timeout=timeout) \
            if self.rank == 0 else None
        where: list[Any] = [self._store.port if self._store is not None else None]
        dist.broadcast_object_list(where, src=0)
        self.port = int(where[0])
        if self._store is None:
            self._store = store(self.host, self.port, is_master=False, timeout=timeout)
        self._closed = False

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def _mine(self, job: Any, timeout_s: float, key: str) -> Outcome:
        from loadtune.trial_process.ranks import GroupSpec

        failed = f"{key}/failed"
        group = GroupSpec(self.rank, self.world_size, self.local_rank, self.host, self.port, key)
        def abort() -> bool:
            try:
                return bool(self._store.check([failed]))
            except Exception:  # noqa: BLE001 - rank 0's store is gone: so is the sweep
                return True

        # The trial watches this sweep process, not rank 0's (which may be on another host).
        outcome = run_in_trial_process(dataclasses.replace(job, ranks=1, group=group, parent_pid=os.getpid()),
                               timeout_s, abort=abort)
        if outcome.status != Status.OK:
            self._store.set(failed, str(self.rank))
        return outcome

    def _exchange(self, message: Any) -> Any:
        import torch.distributed as dist

        box = [message]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _gather(self, outcome: Outcome) -> list[Outcome] | None:
        import torch.distributed as dist

        outcomes: list[Any] | None = [None] * self.world_size if self.leader else None
        dist.gather_object(outcome, outcomes, dst=0)
        return outcomes

    def run_on_every_rank(self, job: Any, timeout_s: float) -> Outcome:
        """Rank 0: run one trial job on every rank at once; the combined outcome."""
        key = uuid.uuid4().hex
        self._exchange((_RUN, job, timeout_s, key))
        outcomes = self._gather(self._mine(job, timeout_s, key)) or []
        return combine_outcomes(outcomes)

    def follow(self) -> int:
        """Ranks other than 0: run what rank 0 sends until it closes; the exit status rank 0 ends
        with, for every rank to end with (a node whose processes all succeed waits at torchrun's
        exit barrier for nodes that failed)."""
        status = 0
        while True:
            message = self._exchange(None)
            if message is None or message[0] == _STOP:
                status = int(message[1]) if message is not None and len(message) > 1 else 0
                break
            _, job, timeout_s, key = message
            self._gather(self._mine(job, timeout_s, key))
        self._leave()
        return status

    def close(self, status: int = 0) -> None:
        """Rank 0: release the other ranks (they exit with `status`, rank 0's own) and leave."""
        if self._closed or not self.leader:
            return
        self._closed = True
        try:
            self._exchange((_STOP, status))
        except Exception:  # noqa: BLE001 - interrupted mid-run: the others are stopped by torchrun
            pass
        finally:
            self._leave()

    def _leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def combine_outcomes(outcomes: list[Outcome]) -> Outcome:
    """The ranks' outcomes of one run as one: failed (naming the rank that failed, not one
    stopped because of it or failing because it went away) unless every rank measured; then the ranks' combined
    measurement, with the process-tree samples of rank 0's trial."""
    wall_s = max((o.wall_s for o in outcomes), default=0.0)
    bad = [(r, o) for r, o in enumerate(outcomes) if o.result is None]
    if bad:
        root = [(r, o) for r, o in bad if o.reason != STOPPED_BY_PEER and not peer_gone(o.reason)] \
            or [(r, o) for r, o in bad if o.reason != STOPPED_BY_PEER] or bad
        rank, outcome = root[0]
        return Outcome(outcome.status, f"rank {rank}: {outcome.reason}", None, wall_s)
    measurement = combine_ranks([o.result for o in outcomes])
    # The figures of a process tree are rank 0's alone (the sweep diagnoses it against its
    # share of its host's cores): its sampler's, and its CPU and fetch counters per window.
    first = outcomes[0].result
    windows = tuple(dataclasses.replace(w, cpu=own.cpu, loaders=own.loaders)
                    for w, own in zip(measurement.windows, first.windows))
    measurement = dataclasses.replace(measurement, resources=first.resources, windows=windows)
    return Outcome(Status.OK, "", measurement, wall_s)


def refuse_nested_ranks(ranks: int) -> None:
    if ranks > 1 and launched():
        raise ConfigError(f"--ranks {ranks} under torchrun: torchrun already starts "
                          f"{os.environ['WORLD_SIZE']} ranks; leave --ranks out")
