"""Real datasets and factories that fail in the ways user code fails, for tests/test_faults.py.

Configs name them as "<abs path>/fault_datasets.py:make_xxx" (see FAULTS in test_faults.py).
Each is a small map-style torch Dataset of 4-float tensors; its fault is chosen by kwargs and
happens inside a real DataLoader, in a worker or in the trial process itself (num_workers=0).
Nothing here knows about loadtune: the faults are the user's own code misbehaving.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils.data import Dataset, get_worker_info

# Read by MemoryHog: a limit in MiB above the process's current address space, applied with
# RLIMIT_AS by the dataset itself in the process that loads it (a trial process or a worker).
MEMORY_LIMIT_VAR = "LOADTUNE_TEST_MEMORY_LIMIT_MB"


def _in_worker() -> bool:
    return get_worker_info() is not None


class Faulty(Dataset):
    """Works like a tiny dataset until index `at` (and, if `where` says so, only in a worker
    or only in the trial process); there it misbehaves as `fault` says."""

    def __init__(self, n: int = 64, at: int = 13, fault: str = "raise", where: str = "any",
                 sig: str = "SIGSEGV", cost_s: float = 0.0, record: str | None = None,
                 escape: bool = False, when_workers: int | None = None, while_exists: str | None = None) -> None:
        self.n, self.at, self.fault, self.where, self.sig, self.cost_s = n, at, fault, where, sig, cost_s
        self.record, self.escape = record, escape  # hang: where to note the pids; a child in a new session
        # Only in a DataLoader with this many workers; only while this file exists.
        self.when_workers, self.while_exists = when_workers, while_exists

    def _note_pids(self) -> None:
        """For a hang: write the pids that must be gone once the trial is stopped."""
        pids = [os.getpid()]
        if _in_worker():
            pids.append(os.getppid())  # the trial process
        if self.escape:  # a helper that leaves the process group, as `start_new_session` does
            pids.append(subprocess.Popen(["sleep", "600"], start_new_session=True).pid)
        for pid in pids:
            with open(os.path.join(self.record, str(pid)), "w"):
                pass

    def __len__(self) -> int:
        return self.n

    def _faulty_here(self, index: int) -> bool:
        if index < self.at:
            return False
        if self.while_exists is not None and not os.path.exists(self.while_exists):
            return False
        if self.when_workers is not None:
            info = get_worker_info()
            if (info.num_workers if info else 0) != self.when_workers:
                return False
        if self.where == "worker":
            return _in_worker()
        if self.where == "main":
            return not _in_worker()
        return True

    def __getitem__(self, index: int) -> Any:
        if self.cost_s:
            time.sleep(self.cost_s)
        if self._faulty_here(index):
            if self.fault == "raise":
                raise ValueError(f"corrupt record {index}")
            if self.fault == "keyerror":
                raise KeyError(f"label_{index}")
            if self.fault == "signal":
                os.kill(os.getpid(), getattr(signal, self.sig))
                time.sleep(60)  # a signal that does not kill at once must not return a sample
            if self.fault == "hang":
                if self.record:
                    self._note_pids()
                while True:
                    time.sleep(3600)
            if self.fault == "object":
                return object()
            if self.fault == "ragged":
                return torch.zeros(4 + index)
            if self.fault == "exit":
                sys.exit(3)
        return torch.full((4,), float(index))


class MemoryHog(Dataset):
    """Allocates until MemoryError; the limit that makes it fail is set by the dataset itself
    (RLIMIT_AS, from MEMORY_LIMIT_VAR) on its first sample, in the process that loads it:
    the factory also runs in the sweep process (preflight), which must stay unlimited."""

    def __init__(self, n: int = 64, at: int = 8, chunk_mb: int = 32) -> None:
        self.n, self.at, self.chunk = n, at, chunk_mb << 20
        self._limited_pid: int | None = None

    def __len__(self) -> int:
        return self.n

    def _limit(self) -> None:
        if self._limited_pid == os.getpid():
            return
        self._limited_pid = os.getpid()
        extra_mb = os.environ.get(MEMORY_LIMIT_VAR)
        if not extra_mb:
            return
        with open("/proc/self/statm") as f:
            address_space = int(f.read().split()[0]) * resource.getpagesize()
        limit = address_space + (int(extra_mb) << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))

    def __getitem__(self, index: int) -> Any:
        if index < self.at:  # the first batches load, so a worker's queue threads are running
            return torch.zeros(4)
        self._limit()
        hoard = []
        while True:  # a leak: each sample keeps what it read
            hoard.append(bytearray(self.chunk))


class NoLength(Dataset):
    """A map-style dataset whose __len__ raises."""

    def __len__(self) -> int:
        raise RuntimeError("index file missing: cannot count samples")

    def __getitem__(self, index: int) -> Any:
        return torch.zeros(4)


def make_faulty(**kwargs: Any) -> Faulty:
    return Faulty(**kwargs)


def make_memory_hog(**kwargs: Any) -> MemoryHog:
    return MemoryHog(**kwargs)


def make_empty() -> Faulty:
    return Faulty(n=0)


def make_no_length() -> NoLength:
    return NoLength()


def make_raising(path: str = "/data/train") -> Dataset:
    raise FileNotFoundError(f"no such directory: {path}")


def make_raising_bracketed() -> Dataset:
    """Its message holds what a terminal library could take for markup: printed as it is."""
    return make_raising("[/data/train] [bold]")


def make_none() -> None:
    """A factory that forgets its return statement."""
    Faulty()


def make_exiting() -> Dataset:
    """A factory that ends the program, as argparse does on a bad command line."""
    sys.exit(2)


def init_raises(worker_id: int) -> None:
    raise RuntimeError(f"worker_init_fn: no GPU for worker {worker_id}")


def collate_raises(batch: Any) -> Any:
    raise RuntimeError("collate_fn: cannot pad a batch of nothing")


class PythonObjects(Dataset):
    """Holds a big Python list of ints and sums a slice of it per sample: every worker that reads
    the list writes reference counts and so copies its pages (pytorch issue 13246)."""

    def __init__(self, num_items: int, num_samples: int):
        self.items = list(range(num_items))
        self.num_samples = num_samples
        self.slice = num_items // num_samples

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        start = index * self.slice
        return torch.tensor([float(sum(self.items[start:start + self.slice]))])


def make_python_objects(num_items: int = 8_000_000, num_samples: int = 160):
    return PythonObjects(num_items, num_samples)


class ThreadReporter(Dataset):
    """Each worker notes, in a file of `folder` named by its pid, its torch threads and the
    OpenMP/BLAS pools' limits as it loads; the training process notes its own when it loads.
    Each note is written beside its file and moved onto it: the sweep may end a trial's workers
    at any moment once it has the result, and a file cut short there would read empty."""

    def __init__(self, folder: str, num_samples: int = 200) -> None:
        self.folder, self.num_samples = folder, num_samples

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> Any:
        import os

        import torch
        from threadpoolctl import threadpool_info

        where = "worker" if _in_worker() else "main"
        pools = sorted({p["num_threads"] for p in threadpool_info()}) or [0]
        note = f"{self.folder}/.{where}-{os.getpid()}.part"
        with open(note, "w") as f:
            f.write(f"{torch.get_num_threads()} {max(pools)}")
        os.replace(note, f"{self.folder}/{where}-{os.getpid()}")
        return torch.zeros(4), index


def make_thread_reporter(folder: str, num_samples: int = 200) -> ThreadReporter:
    return ThreadReporter(folder, num_samples)
