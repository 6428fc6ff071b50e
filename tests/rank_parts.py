"""Steps and datasets that behave differently on each data-parallel rank, for tests/test_ranks.py
and tests/test_rank_stalls.py (and benchmarks/ranks_stress.py): some stall one rank on purpose,
in the user's own code, as a real dataset or step would."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from loadtune.synthetic import sleep_cost

# A port found free can be taken by another process before a rank listens on it: on_a_free_port
# starts the ranks again on a new port when one says so, at most PORT_TRIES times.
PORT_TAKEN = "EADDRINUSE"
PORT_TRIES = 3


def free_port() -> int:
    """A TCP port free on this host now, for a test's rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def on_a_free_port(start: Callable[[int], list[subprocess.Popen]],
                   timeout_s: float) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    """The processes `start(port)` starts, each waited for `timeout_s` at most (killed past it),
    and their (stdout, stderr); started again on a new port where one says the port was taken."""
    for _ in range(PORT_TRIES):
        processes = start(free_port())
        try:
            done = [process.communicate(timeout=timeout_s) for process in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        if not any(PORT_TAKEN in err for _, err in done):
            break
    return processes, done


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _env_rank() -> int:
    return int(os.environ.get("RANK", 0))


def stall_forever(seconds: float = 3600.0) -> None:
    """Where a stalled rank's stack ends: a sleep longer than any test."""
    time.sleep(seconds)


def rank_step(sleep_s: dict | None = None, fail_rank: int | None = None, fail_at: int = 3,
              require_group: bool = False, kill: bool = False, stall_rank: int | None = None,
              stall_at: int = 10) -> Callable[[Any], None]:
    """A step sleeping `sleep_s[rank]` seconds (0 when absent); on `fail_rank`, the `fail_at`-th
    call raises (with `kill`, the rank SIGKILLs itself instead); on `stall_rank`, the `stall_at`-th
    call never ends. With `require_group`, building it outside a process group fails, as building
    a DDP model does."""
    if require_group and not dist.is_initialized():
        raise RuntimeError("Default process group has not been initialized")
    rank = _rank()
    seconds = float((sleep_s or {}).get(rank, (sleep_s or {}).get(str(rank), 0.0)))
    calls = [0]

    def step(batch: Any) -> None:
        calls[0] += 1
        if rank == stall_rank and calls[0] == stall_at:
            stall_forever()
        if rank == fail_rank and calls[0] >= fail_at:
            if kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"step failed on rank {rank} at call {calls[0]}")
        if seconds:
            time.sleep(seconds)

    return step


def rank_sharded(num_samples: int = 400):
    """A dataset factory that asks for its rank while it is built, as a sharding one does."""
    rank, world = dist.get_rank(), dist.get_world_size()  # raises outside a process group
    return sleep_cost(num_samples=num_samples // world + rank, cost_s=0.0002)


def rank_cost(num_samples: int = 400, cost_s: dict | None = None):
    """sleep_cost with a per-sample cost that depends on the rank (RANK in the environment)."""
    rank = int(os.environ.get("RANK", 0))
    costs = cost_s or {}
    return sleep_cost(num_samples=num_samples, cost_s=float(costs.get(rank, costs.get(str(rank), 0.0))))


def slow_to_build(num_samples: int = 400, cost_s: float = 0.0002, stall_rank: int = 1, once: str | None = None):
    """sleep_cost whose building never ends on `stall_rank` (a dataset that hangs reading its
    index); with `once` (a file), only the first time: that build writes the file first, and
    every build on `stall_rank` adds a line to it."""
    if _env_rank() == stall_rank and _first_time(once):
        stall_forever()
    return sleep_cost(num_samples=num_samples, cost_s=cost_s)


def _first_time(once: str | None) -> bool:
    """True unless `once` (a file) exists; the file is made, and each call adds a line to it."""
    if once is None:
        return True
    path = Path(once)
    first = not path.exists()
    with path.open("a") as f:
        f.write(f"{os.getpid()}\n")
    return first


class FirstItemHangs(Dataset):
    """A map-style dataset whose first item, read on `stall_rank`, never comes (with `once`, a
    file: only the first time, see _first_time)."""

    def __init__(self, num_samples: int, stall_rank: int, once: str | None = None) -> None:
        self.num_samples, self.stall_rank, self.once = num_samples, stall_rank, once
        self.read = 0

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.read += 1
        if self.read == 1 and _env_rank() == self.stall_rank and _first_time(self.once):
            stall_forever()
        return torch.full((16,), float(index)), index


def first_item_hangs(num_samples: int = 400, stall_rank: int = 1, once: str | None = None) -> FirstItemHangs:
    return FirstItemHangs(num_samples, stall_rank, once)


def keeps_a_thread(num_samples: int = 400, cost_s: float = 0.0002, stall_rank: int = 1):
    """sleep_cost that, on `stall_rank`, starts a thread that never ends and is not a daemon (a
    cache filler, say): the rank's process cannot exit at the end."""
    if _env_rank() == stall_rank:
        threading.Thread(target=stall_forever, name="never ends", daemon=False).start()
    return sleep_cost(num_samples=num_samples, cost_s=cost_s)
