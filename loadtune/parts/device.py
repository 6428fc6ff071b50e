"""Which device a trial runs on, and moving (nested) batches onto it."""

from __future__ import annotations

from typing import Any, Callable

from loadtune.core.errors import ConfigError


def resolve_device(requested: str) -> str:
    """'auto' becomes 'cuda' when an accelerator is there, else 'cpu'; cuda asked for must exist."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device {requested!r}: no CUDA device is available on this machine")
        index = int(requested.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device {requested!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return requested


def is_accelerator(device: str) -> bool:
    return device != "cpu"


def move(batch: Any, device: Any, non_blocking: bool) -> Any:
    """Copy every tensor in a batch of nested tuples, lists and dicts onto `device`."""
    if hasattr(batch, "to") and hasattr(batch, "is_pinned"):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: move(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(move(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move(v, device, non_blocking) for v in batch)
    return batch


def first_tensor_pinned(batch: Any) -> bool | None:
    """Whether the batch's first tensor sits in pinned memory (None when it holds none)."""
    if hasattr(batch, "is_pinned"):
        return bool(batch.is_pinned())
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        pinned = first_tensor_pinned(item)
        if pinned is not None:
            return pinned
    return None


class CudaTransfer:
    """The copy of a batch onto a CUDA device, non_blocking from pinned memory, returning once
    it has landed. The copy is also timed with CUDA events on the current stream: `copy_s()`
    gives the last one's device time, apart from the host's wall time the loop measures."""

    def __init__(self, device: str, pin_memory: bool) -> None:
        import torch

        self.target = torch.device(device)
        self.non_blocking = pin_memory
        self._start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self._end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self._stream = torch.cuda.current_stream(self.target)

    def __call__(self, batch: Any) -> Any:
        self._start.record(self._stream)
        moved = move(batch, self.target, non_blocking=self.non_blocking)
        self._end.record(self._stream)
        self._end.synchronize()  # the copy has landed before the step starts
        return moved

    def copy_s(self) -> float:
        elapsed_ms: float = self._start.elapsed_time(self._end)
        return elapsed_ms / 1e3


def make_transfer(device: str, pin_memory: bool) -> CudaTransfer | None:
    """None on CPU (h2d is 0 there); on CUDA a CudaTransfer."""
    if not is_accelerator(device):
        return None
    return CudaTransfer(device, pin_memory)


def make_synced_step(step: Callable[[Any], None], device: str) -> Callable[[Any], None]:
    """On CUDA the step's kernels are asynchronous: wait for them so the clock sees them."""
    if not is_accelerator(device):
        return step
    import torch

    target = torch.device(device)

    def synced(batch: Any) -> None:
        step(batch)
        torch.cuda.synchronize(target)

    return synced
