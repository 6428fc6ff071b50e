"""The results file before anything is measured: checked writable with room to spare, and held
by one sweep at a time (a lock file beside it naming the process that writes it)."""

from __future__ import annotations

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


class OutputLock:
    """One writer per results file: the lock file holds the writer's pid, host and command. A
    lock left by a process that is gone (killed, say) is taken over."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = lock_path(out)
        self.held = False

    def acquire(self) -> "OutputLock":
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
              "command": " ".join(sys.argv)}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None:
                    where = "" if holder.get("host") == socket.gethostname() else f" on {holder.get('host')}"
                    raise LoadtuneError(f"{self.out}: another sweep is writing this file (pid {holder['pid']}{where}: "
                                        f"{holder.get('command') or 'loadtune'}); wait for it to end or use another "
                                        f"--out (if that process is gone, delete {self.path})") from None
                self.path.unlink(missing_ok=True)  # its writer is gone: take it over
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise LoadtuneError(f"{self.out}: could not take its lock {self.path}")

    def _holder(self) -> dict | None:
        """The live process holding the lock, or None when the lock is stale (or unreadable)."""
        try:
            holder = json.loads(self.path.read_text())
            pid = int(holder["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        same_host = holder.get("host") == socket.gethostname()
        return holder if pid != os.getpid() and (not same_host or _alive(pid)) else None

    def release(self) -> None:
        if self.held:
            self.held = False
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
