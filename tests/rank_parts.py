"""Steps and datasets that behave differently on each data-parallel rank, for tests/test_ranks.py."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

import torch.distributed as dist

from loadtune.synthetic import sleep_cost


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def rank_step(sleep_s: dict | None = None, fail_rank: int | None = None, fail_at: int = 3,
              require_group: bool = False, kill: bool = False) -> Callable[[Any], None]:
    """A step sleeping `sleep_s[rank]` seconds (0 when absent); on `fail_rank`, the `fail_at`-th
    call raises (with `kill`, the rank SIGKILLs itself instead). With `require_group`, building it
    outside a process group fails, as building a DDP model does."""
    if require_group and not dist.is_initialized():
        raise RuntimeError("Default process group has not been initialized")
    rank = _rank()
    seconds = float((sleep_s or {}).get(rank, (sleep_s or {}).get(str(rank), 0.0)))
    calls = [0]

    def step(batch: Any) -> None:
        calls[0] += 1
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
