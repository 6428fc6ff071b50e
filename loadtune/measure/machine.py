"""What machine a result came from: the columns that make a CSV self-describing."""

from __future__ import annotations

import multiprocessing
import os
import platform
import shutil
import socket
from pathlib import Path

import psutil  # type: ignore[import-untyped]

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
SHM = Path("/dev/shm")
BYTES_PER_GB = 1024**3


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Logical cores this process may run on (cpusets included), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_quota(path: Path = CGROUP_CPU_MAX) -> float | None:
    """The container's CPU limit in cores from cgroup v2 cpu.max, or None when unlimited."""
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if not fields or fields[0] == "max":
        return None
    try:
        period = int(fields[1]) if len(fields) > 1 else 100_000
        return round(int(fields[0]) / period, 2)
    except ValueError:
        return None


def shm_free_gb(path: Path = SHM) -> float | None:
    try:
        return round(shutil.disk_usage(path).free / BYTES_PER_GB, 2)
    except OSError:
        return None


def gpu_name() -> str:
    import torch

    if not torch.cuda.is_available():
        return ""
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    return f"{count}x {name}" if count > 1 else name


def fingerprint(torch_version: str, gpu: str) -> dict[str, object]:
    """The machine's columns; torch's version and the GPU come from a process that has torch
    imported (the sweep's preflight), so that asking costs the caller no import of torch."""
    from loadtune.core.version import __version__

    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": usable_cores(),
        "cpu_quota": cpu_quota(),
        "ram_gb": round(psutil.virtual_memory().total / BYTES_PER_GB, 1),
        "shm_free_gb": shm_free_gb(),
        "gpu": gpu,
        "torch_version": torch_version,
        "python_version": platform.python_version(),
        "loadtune_version": __version__,
        "start_method": multiprocessing.get_start_method(),
    }
