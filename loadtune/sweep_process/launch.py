"""In the sweep process: run one trial job in a trial process of its own, so a crash, hang or
leak cannot touch the others, and sample that process tree from outside while it measures."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from loadtune.core.kinds import Status
from loadtune.measure.resources import TreeSampler
from loadtune.parts.failures import signal_text
from loadtune.record.measurement import Measurement, ResourceSamples
from loadtune.trial_process.channel import (
    COUNTED_END,
    COUNTED_START,
    MAIN_NAME_VAR,
    MAIN_PATH_VAR,
    SAMPLING,
    SYS_PATH_VAR,
)
from loadtune.trial_process.jobs import PreflightJob, TrialJob
from loadtune.trial_process.main import time_imports, trial_main

EXIT_GRACE_S = 10.0
MAX_WAIT_S = 10.0 ** 7  # a longer wait overflows poll(); 115 days is forever here
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}

_context = multiprocessing.get_context("forkserver")
# Trials are forked from a server that has torch imported once, not from the sweep's own
# process: cheap to start, and nothing the sweep did (threads, CUDA) leaks into a trial.
# What every trial needs: torch, the trial's own code, psutil (its CPU readings, through
# loadtune.measure.machine) and what a DataLoader with workers imports.
SERVER_MODULES = ["loadtune.trial_process.server_init", "torch", "torch.utils.data", "loadtune.trial_process.main",
                  "loadtune.measure.machine", "multiprocessing.queues", "multiprocessing.sharedctypes",
                  "multiprocessing.synchronize"]
_context.set_forkserver_preload(SERVER_MODULES)


# The server imports the factory's package modules when it starts (as a trial would). A factory
# given as a file (a user's data.py, which may run code at import: parse arguments, train) and a
# later sweep's modules in the same process (the API, a notebook) are first imported once in a
# process forked from the running server: where that raises nothing but ImportError, answers
# within IMPORT_CHECK_TIMEOUT_S and takes at least RESTART_IMPORT_S, the server is started again
# with them. Every trial would pay that import, and a sweep starts ten or more trial processes
# against one start of the server (a few seconds, torch's import).
RESTART_IMPORT_S = 0.25
IMPORT_CHECK_TIMEOUT_S = 20.0
_served: list[str] = []  # the modules the running server was started with


def preload(specs: list[str], base_dir: str) -> None:
    """Have the trial server import the user's factory modules too (torchvision, say), once,
    instead of every trial process importing them again, and start it (see RESTART_IMPORT_S)."""
    from multiprocessing import forkserver

    packages, files = _modules(specs, base_dir)
    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is None:
        _start_with([*SERVER_MODULES, *packages])
    wanted = [m for m in [*packages, *files] if m not in _served]
    running = getattr(server, "_forkserver_pid", None) is not None and hasattr(server, "_stop")
    if not wanted or not running or _import_s(wanted) < RESTART_IMPORT_S:
        return
    stop_server()
    _start_with([*_served, *wanted])


def stop_server() -> None:
    """End the trial server, if one runs. It is told to end now: left to notice its pipe close, it
    would wait for every process holding that pipe (any forked from this one) to exit."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        server._stop()  # type: ignore[attr-defined]
    except OSError:  # gone already: a new one is started all the same
        setattr(server, "_forkserver_pid", None)


def _start_with(modules: list[str]) -> None:
    _served[:] = list(dict.fromkeys(modules))
    _context.set_forkserver_preload(list(_served))
    _start_server()


def _modules(specs: list[str], base_dir: str) -> tuple[list[str], list[str]]:
    """The modules of the "module:callable" specs: those named as modules, and those given as
    files (by stem, each file's folder put on the path the server takes from here: _start_server)."""
    packages, files = [], []
    for spec in specs:
        module = spec.rpartition(":")[0]
        if module.endswith(".py") or "/" in module:
            path = (Path(base_dir) / module).resolve()
            if str(path.parent) not in sys.path:
                sys.path.append(str(path.parent))
            files.append(path.stem)
        else:
            packages.append(module)
    return list(dict.fromkeys(packages)), list(dict.fromkeys(files))


def _import_s(modules: list[str]) -> float:
    """Seconds a process forked from the running server takes to import `modules`; 0 (the server
    is left as it is) where the check could not run, did not answer in IMPORT_CHECK_TIMEOUT_S, or
    an import raised more than an ImportError."""
    process, took = None, None
    try:
        receiver, sender = _context.Pipe(duplex=False)
        process = _context.Process(target=time_imports, args=(modules, sender), daemon=True,
                                   name="loadtune import check")
        try:
            process.start()
        finally:
            sender.close()
        with receiver:
            took = receiver.recv() if receiver.poll(IMPORT_CHECK_TIMEOUT_S) else None
        return float(took) if took is not None else 0.0
    except Exception:  # noqa: BLE001 - no check, no restart: each trial imports what it needs
        return 0.0
    finally:
        if process is not None and process.pid is not None:
            process.join(EXIT_GRACE_S if took is not None else 0)
            if process.exitcode is None:
                process.kill()
                process.join()


def _start_server() -> None:
    """Start the trial server, telling it (see server_init) the sweep's main module as
    multiprocessing names it to each new process, so that trials do not run that module again:
    the `loadtune` script imports the CLI (0.1 s a trial), a user's script runs its top level.
    Trials need nothing from it: they import every callable by its "module:callable" spec. It
    is told this process's sys.path too, which each trial gets anyway, so that it can import a
    factory given as a file (multiprocessing's server starts on its own path). A server that
    cannot start now is tried again, and reported, by the first trial."""
    from multiprocessing import forkserver, spawn

    main = spawn.get_preparation_data("loadtune")
    told = {MAIN_NAME_VAR: main.get("init_main_from_name"), MAIN_PATH_VAR: main.get("init_main_from_path"),
            SYS_PATH_VAR: os.pathsep.join(sys.path)}
    saved = {key: os.environ.get(key) for key in told}
    try:
        for key, value in told.items():
            if value:
                os.environ[key] = value
            else:
                os.environ.pop(key, None)
        forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the first trial's start says what is wrong
        pass
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass(frozen=True)
class Outcome:
    """What happened to one trial: status ok / failed / timeout, and what it measured."""

    status: str
    reason: str = ""
    result: Any = None  # what the job returned: a Measurement for a trial
    wall_s: float = 0.0


def _kill_group(pgid: int | None) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(pid: int) -> list[Any]:
    """The trial's process tree, taken while it is whole: a worker's own child that left the
    group (a new session) is still found here, not by the group kill."""
    try:
        import psutil  # type: ignore[import-untyped]

        children: list[Any] = psutil.Process(pid).children(recursive=True)
        return children
    except Exception:  # noqa: BLE001 - gone already, or no /proc: the group kill still runs
        return []


def _kill_tree(process: Any) -> None:
    """SIGKILL the trial, its process group and every process of its tree."""
    tree = _descendants(process.pid) if process.pid is not None and process.exitcode is None else []
    if process.pid is not None and process.exitcode is None:
        try:
            process.kill()  # first, so that it cannot start a new process (or group) meanwhile
        except (OSError, ValueError):
            pass
    _kill_group(process.pid)  # the group outlives its leader while a member lives
    for child in tree:
        try:
            child.kill()  # psutil checks that the pid was not reused
        except Exception:  # noqa: BLE001 - already gone
            pass


ABORT_POLL_S = 0.2


ABORTED = "aborted"  # how a wait ended, never a status
# The reason of a rank's part stopped because another rank's part failed (see torchrun).
STOPPED_BY_PEER = "stopped: another rank's part of this trial failed"


def _receive(receiver: Any, process: Any, deadline: float,
             abort: Callable[[], bool] | None = None) -> tuple[Any, str | None]:
    """The next message from the trial process, or None; and why waiting ended without one:
    Status.TIMEOUT (the deadline passed), ABORTED (`abort` said to give up), or None."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None, Status.TIMEOUT
        ready = wait([receiver, process.sentinel], timeout=min(left, MAX_WAIT_S if abort is None else ABORT_POLL_S))
        if ready:
            break
        if abort is None:
            return None, Status.TIMEOUT
        if abort():
            return None, ABORTED
    if receiver in ready:
        try:
            return receiver.recv(), None
        except (EOFError, OSError):
            pass
    return None, None


def _start_sampler(pid: int | None, main_pids: tuple[int, ...] = (),
                   after_mains: Callable[[], None] | None = None) -> TreeSampler | None:
    """A sampler of the tree under `pid`, started; `after_mains` is called once, whatever happens."""
    try:
        if pid is None:
            raise ProcessLookupError("the trial has no process yet")
        sampler = TreeSampler(pid, main_pids=main_pids)
    except Exception:  # noqa: BLE001 - gone already: the trial's own result says why
        if after_mains is not None:
            after_mains()
        return None
    try:
        return sampler.start(memory=True, after_mains=after_mains)  # its first sample calls after_mains
    except Exception:  # noqa: BLE001 - e.g. no thread could be started: the trial runs unsampled
        return None


def _send(conn: Any, message: Any) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass


def run_in_trial_process(job: TrialJob | PreflightJob, timeout_s: float,
                         abort: Callable[[], bool] | None = None) -> Outcome:
    """Run `job` in a new process (and process group) and wait at most `timeout_s` for it.

    While the trial runs its counted windows, this process samples the trial's process tree
    (CPU, memory, reads) from outside, so the sampling takes nothing from the measured loop
    (see _Watch); the result carries the samples. `abort`, polled while waiting, stops the
    trial early when it returns True (another rank's part of the trial failed). The trial's
    whole tree is killed before this returns.
    """
    start = time.perf_counter()
    deadline = start + timeout_s
    receiver, sender = _context.Pipe(duplex=True)
    process = _context.Process(target=trial_main, args=(job, sender), daemon=False,
                               name=f"loadtune {job.name}")
    watch = _Watch(receiver)
    try:
        try:
            process.start()
        except Exception as exc:  # noqa: BLE001 - e.g. no processes or file descriptors left
            return Outcome(Status.FAILED, f"could not start the trial process: {type(exc).__name__}: {exc}",
                           None, time.perf_counter() - start)
        finally:
            sender.close()
        message, ended = _receive(receiver, process, deadline, abort)
        while watch.answer(message, process.pid):
            message, ended = _receive(receiver, process, deadline, abort)
        return _outcome(message, ended, watch.samples, process, timeout_s, time.perf_counter() - start)
    finally:
        _clean_up(watch, process, receiver)


class _Watch:
    """The sweep's side of a trial's counted windows: a sampler of its tree, started when the
    trial says its warm-up starts (answered once the first reading is taken, so that reading
    never falls in a counted window) and stopped when it says its windows end (answered then)."""

    def __init__(self, receiver: Any) -> None:
        self.receiver = receiver
        self.sampler: TreeSampler | None = None
        self.samples: ResourceSamples | None = None

    def answer(self, message: Any, pid: int | None) -> bool:
        """Act on a message about the counted windows; False for any other (a result, or none)."""
        if isinstance(message, tuple) and message[0] == COUNTED_START:
            # The first sample reads memory too, and reading a memory map holds the process's mmap
            # lock for milliseconds: the main process's hand-over of every batch waits on it, so
            # the trial goes on warming up until its main processes are read. A worker's reading
            # only holds that worker up, which the prefetched batches in the queue absorb.
            self.sampler = _start_sampler(pid, tuple(message[1]), lambda: _send(self.receiver, SAMPLING))
            return True
        if message == COUNTED_END:
            self.samples = self.sampler.stop() if self.sampler is not None else None
            self.sampler = None
            _send(self.receiver, COUNTED_END)  # the trial may now tear its workers down
            return True
        return False

    def stop(self) -> None:
        """Stop a sampler still running (the trial ended, or was given up, inside its windows)."""
        if self.sampler is not None:
            self.sampler.stop()


def _outcome(message: Any, ended: str | None, samples: ResourceSamples | None, process: Any, timeout_s: float,
             wall_s: float) -> Outcome:
    """The Outcome of the trial's last message (its result), or of why none came."""
    if message is not None:
        status, payload = message
        if status == Status.OK:  # what was asked is in: the trial's tree is ended at once (_clean_up)
            if samples is not None and isinstance(payload, Measurement):
                payload = dataclasses.replace(payload, resources=(samples,))
            return Outcome(Status.OK, "", payload, wall_s)
        process.join(EXIT_GRACE_S)  # a failed trial's loader stops cleanly as the process exits
        return Outcome(Status.FAILED, payload, None, wall_s)
    if ended == ABORTED:
        return Outcome(Status.FAILED, STOPPED_BY_PEER, None, wall_s)
    if ended == Status.TIMEOUT:
        return Outcome(Status.TIMEOUT, f"no result after measure.timeout_s={timeout_s:g}s "
                                  "(the trial and its workers were killed)", None, wall_s)
    process.join(EXIT_GRACE_S)
    code = process.exitcode
    if code is not None and code < 0:
        why = f"trial process killed by {signal_text(-code)}"
    else:
        why = f"trial process exited with code {code} without a result"
    return Outcome(Status.FAILED, why, None, wall_s)


def _clean_up(watch: _Watch, process: Any, receiver: Any) -> None:
    """Stop the sampler, kill the trial's tree and close the pipe. A second Ctrl-C (or SIGTERM)
    must not cut this short: held until it is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        watch.stop()
        _kill_tree(process)
        if process.pid is not None:
            process.join(EXIT_GRACE_S)
        receiver.close()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
