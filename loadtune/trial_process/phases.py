"""Where each data-parallel rank is, told to the trial process that launched it, and the watch
there that names a rank that stalls, with its phase and Python stack.

Each rank writes its place into a small array of shared memory, forked into it by the launcher
(see ranks.launch): its pid, its phase (rendezvous, setup, first batch, warm-up, window N,
teardown), when it last moved (a phase begun, a collective entered or left) and whether it is
waiting for the other ranks (in a collective, or done and waiting for the others to be). A few
stores of doubles a step: nothing the measured loop would notice.

The trial process's StallWatch reads the array every STALL_POLL_S. A rank is stalled when it
has not moved for longer than its phase's limit while not waiting for the others: those wait
for it, and what it is doing instead is the answer. When every live rank has been waiting that
long, they wait for each other (collectives paired wrongly). The watch asks each stalled rank
for its stack (faulthandler, installed in every rank on STACK_SIGNAL, writes every thread's
Python stack to a file), kills the ranks (the launcher then stops), and keeps the one-line
reason: `rank 1 stalled in window 1 for 30.4 s (limit 30 s): at step (my_step.py:12) <- ...;
stacks in /tmp/loadtune-stall-XXXX.txt`, the innermost frames of the rank's main thread, the
whole dumps in a file of the temporary folder that outlives the trial. ranks.launch retries a
stall before the first batch (Found.before_first_batch) once.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from loadtune.trial_process.stacks import read_stack, stack_line

# A rank's phases, in the order it goes through them. "starting": forked, not yet joining.
PHASES = ("starting", "rendezvous", "setup", "first batch", "warm-up", "window", "teardown")
# Before any batch: the group is formed, the user's dataset and loader built, its workers started
# and the first batch loaded. Longer limits; a stall here is retried once on a fresh rendezvous.
START_PHASES = frozenset(PHASES[:4])

# A rank that neither moves nor waits for the others for this long is stalled: in the warm-up,
# the windows and the teardown, where each batch, step and collective moves it (a step or a
# batch a hundred times longer than usual would not fit a trial's timeout anyway).
STALL_LIMIT_S = 30.0
# The same before the first batch, where the user's dataset is built (reading an index, opening
# files) and the workers load their first batches.
START_STALL_LIMIT_S = 120.0
# No limit is more than this share of measure.timeout_s: a stall is reported, and a stall before
# the first batch retried, before the sweep kills the trial at its timeout (300 s by default:
# limits 30 s and 100 s; 180 s: 30 s and 60 s).
TIMEOUT_SHARE = 1 / 3
# "START,OTHER" seconds in place of START_STALL_LIMIT_S and STALL_LIMIT_S (still capped by
# TIMEOUT_SHARE): for tests and benchmarks, which stall ranks on purpose.
LIMITS_VAR = "LOADTUNE_STALL_LIMITS_S"
# A test hook, read by each rank once: "RANK:PHASE:SECONDS" sleeps SECONDS in rank RANK as it
# enters PHASE ("window" matches any window, "window 2" that one). The only way to stall a rank
# before its group is formed, where no user code runs.
TEST_STALL_VAR = "LOADTUNE_TEST_STALL"
# How often the trial process reads the ranks' phases.
STALL_POLL_S = 0.5
# The signal on which a rank writes its threads' stacks, and how long the watch waits for them.
STACK_SIGNAL = signal.SIGUSR1
STACK_WAIT_S = 2.0

# Each rank's doubles in the shared array.
_PID, _IDENT, _PHASE, _NUMBER, _MOVED, _WAITING, _RETURNED = range(7)
_FIELDS = 7


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 99.5 else f"{value:.1f} s"


@dataclass(frozen=True)
class StallLimits:
    """Seconds a rank may go without moving: before its first batch (`start_s`) and after (`other_s`)."""

    start_s: float
    other_s: float

    @classmethod
    def for_timeout(cls, timeout_s: float, environ: dict[str, str] | None = None) -> "StallLimits":
        start, other = START_STALL_LIMIT_S, STALL_LIMIT_S
        given = (os.environ if environ is None else environ).get(LIMITS_VAR, "")
        if given:
            try:
                first, _, second = given.partition(",")
                start, other = float(first), float(second or first)
            except ValueError:
                pass
        cap = timeout_s * TIMEOUT_SHARE
        return cls(min(start, cap), min(other, cap))

    def of(self, phase: str) -> float:
        return self.start_s if phase in START_PHASES else self.other_s


def split_phase(text: str) -> tuple[str, int]:
    """'window 2' -> ('window', 2); 'setup' -> ('setup', 0)."""
    name, _, number = text.rpartition(" ")
    if name and number.isdigit():
        return name, int(number)
    return text, 0


@dataclass(frozen=True)
class RankState:
    """One rank's place as the trial process reads it."""

    rank: int
    pid: int
    ident: int  # its main thread's (threading.get_ident)
    phase: str  # "window 2", "setup", ...
    moved_at: float  # time.monotonic() when it last moved
    waiting: bool  # for the other ranks: in a collective, or done
    returned: bool  # its measuring is done; it waits for the others, then exits

    @property
    def name(self) -> str:
        return split_phase(self.phase)[0]


class PhaseBoard:
    """The shared array the ranks write their places into, made before they are forked."""

    def __init__(self, ranks: int, folder: str) -> None:
        self.ranks, self.folder = ranks, folder
        self.slots: Any = multiprocessing.get_context("fork").RawArray("d", ranks * _FIELDS)

    def stack_path(self, rank: int) -> Path:
        return Path(self.folder) / f"rank{rank}.stack"

    def read(self) -> list[RankState]:
        """The ranks that have started (written their pid), in rank order."""
        values = list(self.slots)
        found = []
        for rank in range(self.ranks):
            at = rank * _FIELDS
            pid = int(values[at + _PID])
            if pid <= 0:
                continue
            code = int(values[at + _PHASE])
            name = PHASES[code] if 0 <= code < len(PHASES) else "starting"
            number = int(values[at + _NUMBER])
            found.append(RankState(rank, pid, int(values[at + _IDENT]), f"{name} {number}" if number else name,
                                   values[at + _MOVED], values[at + _WAITING] > 0, values[at + _RETURNED] > 0))
        return found

    def reached(self, rank: int, phase: str) -> bool:
        """Whether `rank` went as far as `phase`."""
        return int(self.slots[rank * _FIELDS + _PHASE]) >= PHASES.index(phase)


def _test_stall(rank: int, environ: dict[str, str] | None = None) -> tuple[str, float] | None:
    given = (os.environ if environ is None else environ).get(TEST_STALL_VAR, "")
    parts = given.split(":")
    if len(parts) != 3:
        return None
    try:
        if int(parts[0]) != rank:
            return None
        return parts[1].strip(), float(parts[2])
    except ValueError:
        return None


def injected_stall(seconds: float) -> None:
    """The test hook's stall (TEST_STALL_VAR): named, so that the stack shows it."""
    time.sleep(seconds)


class RankPhases:
    """A rank's side of the board: made once in the rank, first thing, told each phase and wait."""

    def __init__(self, board: PhaseBoard, rank: int) -> None:
        self.slots, self.at = board.slots, rank * _FIELDS
        self.phase = "starting"
        self._waits = 0
        self._hook = _test_stall(rank)
        try:
            # Kept open for the process's life: faulthandler writes to its descriptor.
            self._stack_file = open(board.stack_path(rank), "w")
            faulthandler.register(STACK_SIGNAL, file=self._stack_file, all_threads=True)
        except (OSError, ValueError, RuntimeError):
            pass
        self.slots[self.at + _MOVED] = time.monotonic()
        self.slots[self.at + _IDENT] = float(threading.get_ident())
        self.slots[self.at + _PID] = float(os.getpid())

    def enter(self, phase: str) -> None:
        """This rank begins `phase` ('setup', 'window 2', ...)."""
        name, number = split_phase(phase)
        self.phase = phase
        self.slots[self.at + _MOVED] = time.monotonic()  # first: a phase read new is never read stale
        self.slots[self.at + _NUMBER] = float(number)
        self.slots[self.at + _PHASE] = float(PHASES.index(name))
        if self._hook is not None and self._hook[0] in (name, phase):
            seconds, self._hook = self._hook[1], None
            injected_stall(seconds)

    def wait_start(self) -> None:
        self.slots[self.at + _MOVED] = time.monotonic()
        self._waits += 1
        self.slots[self.at + _WAITING] = 1.0

    def wait_end(self) -> None:
        self._waits -= 1
        if self._waits <= 0:
            self._waits = 0
            self.slots[self.at + _WAITING] = 0.0
        self.slots[self.at + _MOVED] = time.monotonic()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Waiting for the other ranks (a collective): not this rank's own stall."""
        self.wait_start()
        try:
            yield
        finally:
            self.wait_end()

    def returned(self) -> None:
        """Done: the launcher holds this rank until every rank is, then it exits."""
        self.slots[self.at + _MOVED] = time.monotonic()
        self.slots[self.at + _RETURNED] = 1.0


@dataclass(frozen=True)
class Found:
    """Ranks stalled: one that neither moves nor waits, or all of them waiting for each other."""

    ranks: tuple[RankState, ...]
    idle_s: float
    limit_s: float
    each_waiting: bool
    missing: tuple[int, ...] = ()  # ranks that never started their part (those wait for them)

    @property
    def before_first_batch(self) -> bool:
        return all(s.name in START_PHASES for s in self.ranks)


def find_stall(states: Sequence[RankState], alive: Callable[[int], bool], now: float, limits: StallLimits,
               world: int | None = None) -> Found | None:
    """The stalled rank (the one idle longest past its limit) among `states` (of `world` ranks),
    or every live rank when all of them have been waiting past their limits; None while things move."""
    live = [s for s in states if alive(s.pid)]
    if not live:
        return None
    # Once every rank is done, the launcher lets them all exit: none waits for another any more.
    all_done = len(states) == (len(states) if world is None else world) and all(s.returned for s in states)
    done_at = max(s.moved_at for s in states) if all_done else 0.0
    idle = {s.rank: now - (done_at if all_done else s.moved_at) for s in live}
    waiting = {s.rank: (s.waiting or s.returned) and not all_done for s in live}
    over = [s for s in live if idle[s.rank] > limits.of(s.name)]
    own = [s for s in over if not waiting[s.rank]]
    if own:
        worst = max(own, key=lambda s: (idle[s.rank] - limits.of(s.name), -s.rank))
        return Found((worst,), idle[worst.rank], limits.of(worst.name), False)
    if len(over) == len(live) and all(waiting[s.rank] for s in live):
        missing = tuple(sorted(set(range(world or 0)) - {s.rank for s in states}))
        return Found(tuple(live), min(idle.values()), max(limits.of(s.name) for s in live), True, missing)
    return None


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


# --- the watch -------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """A rank of this process still running (not exited, not a zombie)."""
    import psutil  # type: ignore[import-untyped]

    try:
        proc = psutil.Process(pid)
        return bool(proc.ppid() == os.getpid() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def kill_tree(pid: int) -> None:
    """SIGKILL a rank of this process and everything under it (its DataLoader workers)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.ppid() != os.getpid():
            return
        below = proc.children(recursive=True)
    except psutil.Error:
        return
    for each in (proc, *below):
        try:
            each.kill()
        except psutil.Error:
            pass


@dataclass(frozen=True)
class Stall:
    """A stall found and stopped: its one-line reason, once the attempt is known."""

    found: Found
    stacks: dict[int, str]  # each stalled rank's stack in one line
    full: str | None  # a file holding the stalled ranks' whole dumps

    def reason(self, retried: bool = False) -> str:
        f = self.found
        again = ", again after a retry on a fresh rendezvous" if retried else ""
        timing = f"for {_seconds(f.idle_s)} (limit {f.limit_s:g} s)"
        where = f"; stacks in {self.full}" if self.full else ""
        if not f.each_waiting:
            s = f.ranks[0]
            return f"rank {s.rank} stalled in {s.phase} {timing}{again}: {self.stacks.get(s.rank, '')}{where}"
        word = "rank" if len(f.ranks) == 1 else "ranks"
        if len({s.phase for s in f.ranks}) == 1:
            head = f"{word} {_listed([str(s.rank) for s in f.ranks])} stalled in {f.ranks[0].phase} {timing}"
        else:
            head = f"{word} {_listed([f'{s.rank} ({s.phase})' for s in f.ranks])} stalled {timing}"
        if f.missing:
            why = (f"waiting for rank{'s' if len(f.missing) > 1 else ''} {_listed([str(r) for r in f.missing])}, "
                   "which never started")
        elif len(f.ranks) == 1:
            why = "waiting for the others"
        else:
            why = "each waiting for the others in a collective"
        if len(f.ranks) == 1:
            return f"{head}, {why}{again}: {self.stacks.get(f.ranks[0].rank, '')}{where}"
        each = "; ".join(f"rank {s.rank} {self.stacks.get(s.rank, '')}" for s in f.ranks)
        return f"{head}, {why}{again}: {each}{where}"


class StallWatch:
    """Reads the board every STALL_POLL_S while the ranks run (a thread of the trial process);
    on a stall, takes the stalled ranks' stacks and kills every rank, so the launch ends."""

    def __init__(self, board: PhaseBoard, limits: StallLimits, poll_s: float = STALL_POLL_S,
                 alive: Callable[[int], bool] = _alive) -> None:
        self.board, self.limits, self.poll_s, self.alive = board, limits, poll_s, alive
        self.stall: Stall | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadtune stall watch", daemon=True)

    def __enter__(self) -> "StallWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                states = self.board.read()
                found = find_stall(states, self.alive, time.monotonic(), self.limits, self.board.ranks)
            except Exception:  # noqa: BLE001 - the watch must not end the trial; the timeout still does
                continue
            if found is not None:
                self.stall = self._stop_stalled(found, states)
                return

    def _stop_stalled(self, found: Found, states: Sequence[RankState]) -> Stall:
        for s in found.ranks:
            try:
                os.kill(s.pid, STACK_SIGNAL)
            except OSError:
                pass
        dumps = {s.rank: read_stack(self.board.stack_path(s.rank), STACK_WAIT_S) for s in found.ranks}
        for s in states:
            kill_tree(s.pid)
        stacks = {s.rank: stack_line(dumps[s.rank], s.ident) if dumps[s.rank]
                  else "no Python stack (the rank did not answer)" for s in found.ranks}
        return Stall(found, stacks, _keep_dumps(found, dumps))


def _keep_dumps(found: Found, dumps: dict[int, str]) -> str | None:
    """The whole dumps, in a file that outlives the trial (the launch's folder does not)."""
    if not any(dumps.values()):
        return None
    try:
        handle, path = tempfile.mkstemp(prefix="loadtune-stall-", suffix=".txt")
        with os.fdopen(handle, "w") as out:
            for s in found.ranks:
                out.write(f"rank {s.rank} (pid {s.pid}), {s.phase}, main thread {s.ident:#x}:\n{dumps[s.rank]}\n")
        return path
    except OSError:
        return None
