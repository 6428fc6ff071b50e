"""A process's children and descendants from /proc/PID/task/TID/children: a few small files
read, instead of every process's stat file (which is what psutil's children() reads)."""

from __future__ import annotations

import os

PROC = "/proc"


def child_pids(pid: int) -> list[int]:
    """The children of `pid`, from each of its threads' children file; none when it is gone."""
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"{PROC}/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return found


def descendant_pids(pid: int) -> list[int]:
    """Every descendant of `pid`, its children first, then theirs."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [kid for parent in frontier for kid in child_pids(parent)]
        found.extend(frontier)
    return found
