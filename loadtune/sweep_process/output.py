"""The results file before anything is measured: checked writable with room to spare, and held
by one sweep at a time (a locked file beside it naming the process that writes it)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

from loadtune.errors import LoadtuneError

# Room the results need at least: a few hundred rows, the per-rank file, the chart.
MIN_FREE_BYTES = 16 * 1024**2


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


def check_writable(out: Path, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Refuse, in one line, an output that cannot be written or a disk too full for it."""
    if out.is_dir():
        raise LoadtuneError(f"{out}: is a folder; give a CSV file path (--out)")
    folder = out.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LoadtuneError(f"{out}: cannot create its folder {folder}: {exc.strerror or exc}") from None
    probe = folder / f".{out.name}.{os.getpid()}.probe"
    try:
        probe.write_bytes(b"loadtune")
    except OSError as exc:
        raise LoadtuneError(f"{out}: cannot write in {folder}: {exc.strerror or exc}; choose another --out") from None
    finally:
        probe.unlink(missing_ok=True)
    free = shutil.disk_usage(folder).free
    if free < min_free_bytes:
        raise LoadtuneError(f"{out}: only {free / 1024**2:.1f} MB free on its disk; the results need "
                            f"{min_free_bytes / 1024**2:.0f} MB: free some space or choose another --out")


class OutputLock:
    """One writer per results file: an exclusive lock (flock) on a file beside it, which holds
    the writer's pid, host and command for the message a second sweep gets. The kernel drops
    the lock when its process ends, however it ends, so a lock left behind is simply taken."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = lock_path(out)
        self.fd: int | None = None

    def acquire(self) -> "OutputLock":
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = self._holder(fd)
                os.close(fd)
                raise LoadtuneError(f"{self.out}: another sweep is writing this file ({holder}); wait for it to "
                                    "end or use another --out") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its last holder removed meanwhile
                break
            os.close(fd)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())
        self.fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
        except (OSError, ValueError):
            holder = {}
        where = f" on {holder['host']}" if holder.get("host") not in (None, socket.gethostname()) else ""
        return f"pid {holder.get('pid', '?')}{where}: {holder.get('command') or 'loadtune'}"

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: no one else can hold this file now
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
