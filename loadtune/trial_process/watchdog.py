"""A trial process watches the sweep that started it: if the sweep dies, the trial takes its
workers and their children down with it."""

from __future__ import annotations

import os
import signal
import time

PARENT_POLL_S = 0.5


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """State and start time of a process from /proc, None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _parent_alive(parent_pid: int, started: str | None) -> bool:
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # that pid now belongs to another user's process
    stat = _proc_stat(parent_pid)
    if stat is None:
        return True
    state, start = stat
    # A dead sweep not yet reaped by its own parent is a zombie; a reused pid starts later.
    return state not in ("Z", "X") and (started is None or start == started)


def _kill_own_tree() -> None:
    try:
        import psutil  # type: ignore[import-untyped]

        for child in psutil.Process().children(recursive=True):  # also those in other groups
            try:
                child.kill()
            except psutil.Error:
                pass
    except Exception:  # noqa: BLE001 - the group kill below is what matters
        pass
    os.killpg(0, signal.SIGKILL)


def exit_with_parent(parent_pid: int) -> None:
    """If the sweep itself dies, take this trial and its workers down too."""
    stat = _proc_stat(parent_pid)
    started = stat[1] if stat else None
    while True:
        time.sleep(PARENT_POLL_S)
        if not _parent_alive(parent_pid, started):
            _kill_own_tree()
