"""A step whose GPU work takes a known time, for tests/test_cuda.py."""

from __future__ import annotations

from typing import Any, Callable


def gpu_busy_step(busy_ms: float = 20.0, device: str = "cuda") -> Callable[[Any], None]:
    """A step that queues `busy_ms` of GPU spinning and returns at once: the host does not
    wait unless the caller synchronises. Calibrated with CUDA events when built."""
    import torch

    target = torch.device(device)
    cycles = 1_000_000
    with torch.cuda.device(target):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        per_cycle_ms = start.elapsed_time(end) / cycles
    want = int(busy_ms / per_cycle_ms)

    def step(batch: Any) -> None:
        with torch.cuda.device(target):
            torch.cuda._sleep(want)

    return step
