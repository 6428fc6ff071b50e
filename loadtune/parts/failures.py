"""A trial's failure as one line for the results: the exception, where it happened (the dataset
index, the worker), or the signal a process died of and what that usually means."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

# Prefix of the note added to an exception raised while loading a sample or collating a batch;
# it travels inside the traceback text of an error re-raised from a DataLoader worker.
NOTE_PREFIX = "[loadtune] "
# What a death by these signals usually means.
SIGNAL_HINTS = {
    "SIGKILL": "out of memory? the kernel's OOM killer sends SIGKILL",
    "SIGBUS": "/dev/shm may be too small for the batches workers share (Docker's default is 64 MB)",
}


# Errors with which a batch's hand-over from a worker breaks when the worker dies during it (the
# trial process is fetching the batch's shared memory from the worker's socket).
HANDOVER_BROKEN = (ConnectionError, EOFError)
# How long a worker whose hand-over broke is given to show its exit status: its sockets close
# before the kernel records how it ended.
DEATH_SEEN_WITHIN_S = 1.0
DEATH_POLL_S = 0.01

# What torch's text of an error re-raised from a worker holds: the worker's own traceback.
FROM_A_WORKER = "Original Traceback"

_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.\n]+)")
_CAUGHT = re.compile(r"^Caught \S+ ")


def signal_text(signum: int) -> str:
    """A signal as a reason: 'SIGSEGV (Segmentation fault)', with what it usually means."""
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}"
    text = f"{sig.name} ({signal.strsignal(sig)})" if signal.strsignal(sig) else sig.name
    hint = SIGNAL_HINTS.get(sig.name)
    return f"{text}; {hint}" if hint else text


def _signal_named(description: str) -> int | None:
    for sig in signal.Signals:
        if signal.strsignal(sig) == description:
            return int(sig)
    return None


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a user exception whose __str__ fails
        return ""


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _frame_locals(chain: list[BaseException]) -> Iterator[dict[str, Any]]:
    """The local variables of every frame the errors of `chain` passed through, innermost last."""
    for link in chain:
        tb = link.__traceback__
        while tb is not None:
            yield tb.tb_frame.f_locals
            tb = tb.tb_next


def _killed(pid: int | str, how: str) -> str:
    return f"DataLoader worker (pid {pid}) killed by {how}"


def _worker_death(exc: BaseException) -> str | None:
    """'DataLoader worker (pid N) killed by SIGSEGV (...)' when a worker died of a signal.

    torch's SIGCHLD handler names the signal in an error that its "worker exited unexpectedly"
    error chains; without it, the dead workers' exit codes are read off the traceback."""
    chain = _chain(exc)
    for link in chain:
        found = _WORKER_KILLED.search(_text(link))
        if found:
            pid, description = found.group(1), found.group(2).strip()
            signum = _signal_named(description)
            return _killed(pid, signal_text(signum) if signum is not None else description)
    for f_locals in _frame_locals(chain):
        codes = [(w.pid, w.exitcode) for w in f_locals.get("failed_workers") or ()
                 if isinstance(getattr(w, "exitcode", None), int)]
        if codes:
            how = [f"pid {pid} killed by {signal_text(-code)}" if code < 0 else f"pid {pid} exit code {code}"
                   for pid, code in codes]
            first = next((ln.strip() for ln in _text(exc).splitlines() if ln.strip()), "")
            return f"{type(exc).__name__}: {first} ({'; '.join(how)})"
    return None


def _loader_workers(chain: list[BaseException]) -> list[Any]:
    """The worker processes of the DataLoader iterator the error was raised in (read off the
    traceback: the iterator is `self` of torch's frames)."""
    for f_locals in _frame_locals(chain):
        workers = getattr(f_locals.get("self"), "_workers", None)
        if isinstance(workers, list) and workers:
            return workers
    return []


def killed_in_handover(exc: BaseException, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> str | None:
    """'DataLoader worker (pid N) killed by SIGKILL (...)' when a batch's hand-over broke because
    its worker died of a signal: torch raises the broken connection itself when the worker was not
    yet seen dead, so its exit status is waited for here (at most DEATH_SEEN_WITHIN_S)."""
    chain = _chain(exc)
    # Not an error a worker raised itself (a dataset's own broken connection), which torch re-raises.
    if not any(isinstance(link, HANDOVER_BROKEN) and FROM_A_WORKER not in _text(link) for link in chain):
        return None
    workers = _loader_workers(chain)
    deadline = clock() + DEATH_SEEN_WITHIN_S
    killed: list[tuple[int, int]] = []
    while workers:
        killed = [(w.pid, w.exitcode) for w in workers if isinstance(w.exitcode, int) and w.exitcode < 0]
        if killed or clock() >= deadline:
            break
        sleep(DEATH_POLL_S)
    if not killed:
        return None
    # A worker stopped by the loader's own shutdown (SIGTERM) is named only when no other was killed.
    pid, code = min(killed, key=lambda k: k[1] == -signal.SIGTERM)
    return _killed(pid, signal_text(-code))


def _from_worker(text: str) -> tuple[str, list[str], str]:
    """An error re-raised from a worker ('Caught X in DataLoader worker process N.' and the
    worker's traceback): the original error line, loadtune's notes, and where it happened."""
    lines = text.splitlines()
    where = _CAUGHT.sub("", lines[0].strip().rstrip("."))
    body = lines[1:]
    frames = [i for i, ln in enumerate(body) if ln.startswith('  File "')]
    i = frames[-1] + 1 if frames else 0
    while i < len(body) and body[i].startswith("    "):  # the frame's source line and ^^^ marks
        i += 1
    rest = [ln.strip() for ln in body[i:] if ln.strip()]
    notes = [ln[len(NOTE_PREFIX):] for ln in rest if ln.startswith(NOTE_PREFIX)]
    error = next((ln for ln in rest if not ln.startswith(NOTE_PREFIX)), lines[0].strip())
    return error, notes, where


def describe(exc: BaseException) -> str:
    """One line for the CSV: the exception type, its most telling message line, and where it
    happened when known (the dataset index, the worker); a worker's death names the signal."""
    try:
        if getattr(exc, "reason_as_is", False):  # already a whole reason (ranks.RankFailedError)
            return _text(exc)
        death = _worker_death(exc) or killed_in_handover(exc)
        if death:
            return death
        text = _text(exc)
        if FROM_A_WORKER in text:
            error, notes, where = _from_worker(text)
            extra = [*notes, where]
        else:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
            extra = [n[len(NOTE_PREFIX):] for n in getattr(exc, "__notes__", None) or ()
                     if isinstance(n, str) and n.startswith(NOTE_PREFIX)]
        return f"{error} ({', '.join(extra)})" if extra else error
    except Exception:  # noqa: BLE001 - describing a failure must not fail
        return type(exc).__name__
