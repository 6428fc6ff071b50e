"""A rank's Python stacks, as faulthandler dumps them on a signal (see phases): parsed, and the
main thread's stack told in one line, innermost frames first, with the innermost frame of the
user's own code where it lies further out."""

from __future__ import annotations

import os
import re
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

# Innermost frames of a stack in a reason.
STACK_FRAMES = 4

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')


@dataclass(frozen=True)
class Frame:
    function: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.function} ({os.path.basename(self.path)}:{self.line})"


def parse_stacks(text: str) -> dict[int, list[Frame]]:
    """faulthandler's dump of all threads: each thread's ident and its frames, innermost first.
    The thread that wrote the dump is also under -1."""
    threads: dict[int, list[Frame]] = {}
    frames: list[Frame] | None = None
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            frames = []
            threads[int(head.group(2), 16)] = frames
            if head.group(1) == "Current thread":
                threads[-1] = frames
            continue
        frame = _FRAME.match(line)
        if frame and frames is not None:
            frames.append(Frame(frame.group(3), frame.group(1), int(frame.group(2))))
    return threads


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(str(Path(__file__).resolve().parents[1]))  # loadtune itself
    return tuple(sorted(os.path.realpath(r) for r in roots if r))


def _is_user(frame: Frame, roots: tuple[str, ...]) -> bool:
    if frame.path.startswith("<"):
        return False
    path = os.path.realpath(frame.path)
    return not any(path == root or path.startswith(root + os.sep) for root in roots)


def condense(frames: Sequence[Frame], count: int = STACK_FRAMES) -> str:
    """A stack in one line, innermost first: the first `count` frames, and the innermost one of
    the user's own code when it lies further out ('at f (a.py:3) <- g (b.py:9) ... <- h (mine.py:5)')."""
    if not frames:
        return "no Python frame"
    shown = [str(f) for f in frames[:count]]
    roots = _library_roots()
    if not any(_is_user(f, roots) for f in frames[:count]):
        user = next((i for i, f in enumerate(frames) if i >= count and _is_user(f, roots)), None)
        if user is not None:
            shown.append(("... <- " if user > count else "") + str(frames[user]))
            return "at " + " <- ".join(shown[:-1]) + " <- " + shown[-1]
    more = " <- ..." if len(frames) > count else ""
    return "at " + " <- ".join(shown) + more


def stack_line(text: str, ident: int) -> str:
    """The main thread's stack (by its ident; else the thread that wrote the dump) in one line;
    a main thread waiting for other threads to end (at exit) adds theirs."""
    threads = parse_stacks(text)
    main = threads.get(ident) if ident in threads else threads.get(-1)
    if main is None:
        return "no Python stack (the rank wrote none)"
    line = condense(main)
    if main and main[0].function == "_shutdown" and os.path.basename(main[0].path) == "threading.py":
        others = [frames for key, frames in threads.items() if key not in (-1, ident) and frames is not main]
        if others:
            line += "; waiting for its other threads to end: " + "; ".join(condense(f, 2) for f in others[:3])
    return line


def read_stack(path: Path, wait_s: float) -> str:
    """The dump a rank writes on STACK_SIGNAL, once it stops growing (or after `wait_s`)."""
    deadline = time.monotonic() + wait_s
    last = -1
    while True:
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if size > 0 and size == last:
            break
        if time.monotonic() >= deadline:
            break
        last = size
        time.sleep(0.1)
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
