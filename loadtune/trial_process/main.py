"""The entry point of a trial process: one job in, one message back."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import warnings
from typing import Any

from loadtune.core.kinds import Status
from loadtune.parts.failures import describe
from loadtune.trial_process.channel import SweepChannel
from loadtune.trial_process.execute import measure_trial
from loadtune.trial_process.jobs import PreflightJob, TrialJob
from loadtune.trial_process.preflight import run_preflight
from loadtune.trial_process.watchdog import exit_with_parent


def trial_main(job: TrialJob | PreflightJob, conn: Any) -> None:
    """Run `job` in this fresh process and send ('ok', result) or ('failed', why), after the
    sampling notes of the channel."""
    channel = SweepChannel(conn)
    os.setpgrp()  # the trial and its DataLoader workers form one group, killed as one
    # This process came from the trial server; its workers must start the way they would in
    # the user's training script (fork on Linux before Python 3.14), not from that server.
    multiprocessing.set_start_method(job.start_method, force=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides what happens on Ctrl-C
    # The sweep warns once about workers beyond the cores; DataLoader's own warning would
    # repeat in every trial process.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    threading.Thread(target=exit_with_parent, args=(job.parent_pid,), daemon=True).start()
    try:
        result: Any = run_preflight(job) if isinstance(job, PreflightJob) else measure_trial(job, channel)
        message: tuple[str, Any] = (Status.OK, result)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row, not a crash
        channel.release()  # a failed loader's workers stop cleanly, before the message
        _workers_done()
        message = (Status.FAILED, describe(exc))
    _workers_done()
    channel.send_result(message)


def _workers_done() -> None:
    """The trial is over: DataLoader's SIGCHLD handler, which raises in whatever this process is
    doing when one of its workers dies, would otherwise interrupt the message that says so."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def time_imports(modules: list[str], sender: object) -> None:
    """In a process forked from the trial server: send the seconds importing `modules` takes here
    (what each trial would spend on them), or None where one raises more than an ImportError (the
    server skips only those: such a module would stop it)."""
    import importlib
    import time

    start = time.perf_counter()
    took: float | None = None
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError:  # the trial that needs it says what is wrong
                pass
        took = time.perf_counter() - start
    except BaseException:  # noqa: BLE001 - reported as None, the server left as it is
        pass
    sender.send(took)  # type: ignore[attr-defined]
