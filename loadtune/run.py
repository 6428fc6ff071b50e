"""Run one trial in a process of its own, so a crash, hang or leak cannot touch the others."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

from loadtune.measure import Measurement
from loadtune.trial import TrialJob, trial_main

EXIT_GRACE_S = 10.0

_context = multiprocessing.get_context("forkserver")
# Trials are forked from a server that has torch imported once, not from the sweep's own
# process: cheap to start, and nothing the sweep did (threads, CUDA) leaks into a trial.
_context.set_forkserver_preload(["loadtune.trial"])


@dataclass(frozen=True)
class Outcome:
    """What happened to one trial: status ok / failed / timeout, and what it measured."""

    status: str
    reason: str = ""
    measurement: Measurement | None = None
    wall_s: float = 0.0


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def run_isolated(job: TrialJob, timeout_s: float) -> Outcome:
    """Run `job` in a new process (and process group) and wait at most `timeout_s` for it."""
    start = time.perf_counter()
    receiver, sender = _context.Pipe(duplex=False)
    process = _context.Process(target=trial_main, args=(job, sender), daemon=False,
                               name=f"loadtune-trial {job.trial.name}")
    process.start()
    sender.close()
    try:
        ready = wait([receiver, process.sentinel], timeout=timeout_s)
        message = None
        if receiver in ready:
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                message = None
        wall_s = time.perf_counter() - start
        if message is not None:
            process.join(EXIT_GRACE_S)
            status, payload = message
            if status == "ok":
                return Outcome("ok", "", payload, wall_s)
            return Outcome("failed", payload, None, wall_s)
        if not ready:
            return Outcome("timeout", f"no result after measure.timeout_s={timeout_s:g}s "
                                      "(the trial and its workers were killed)", None, wall_s)
        process.join(EXIT_GRACE_S)
        code = process.exitcode
        if code is not None and code < 0:
            why = f"trial process killed by {_signal_name(-code)}"
        else:
            why = f"trial process exited with code {code} without a result"
        return Outcome("failed", why, None, wall_s)
    finally:
        _kill_group(process.pid)
        process.join(EXIT_GRACE_S)
        receiver.close()
