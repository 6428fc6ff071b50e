"""A worker's death named in the failure's one line when the batch's hand-over broke before torch
saw the worker dead (the error is then the broken connection, not torch's worker-killed error)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

from loadtune.parts.failures import DEATH_POLL_S, DEATH_SEEN_WITHIN_S, describe, killed_in_handover
from tests.test_measure import FakeClock


class _Iterator:
    """Stands where torch's DataLoader iterator stands in the traceback: `self` with `_workers`."""

    def __init__(self, workers: list[Any]) -> None:
        self._workers = workers

    def get(self, error: BaseException) -> None:
        raise error


def _raised(workers: list[Any], error: BaseException) -> BaseException:
    try:
        _Iterator(workers).get(error)
    except BaseException as exc:  # noqa: BLE001 - the error is the value under test
        return exc
    raise AssertionError("not raised")


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_during_the_handover_is_named_from_its_exit_status():
    worker = multiprocessing.get_context("fork").Process(target=_kill_self)
    worker.start()
    worker.join()
    for broken in (ConnectionResetError(104, "Connection reset by peer"), EOFError()):
        assert describe(_raised([worker], broken)) == (
            f"DataLoader worker (pid {worker.pid}) killed by SIGKILL (Killed); "
            "out of memory? the kernel's OOM killer sends SIGKILL")


class _DiesLater:
    """A worker whose exit status shows after `polls` reads (fakes only the moment it is seen)."""

    def __init__(self, pid: int, polls: int, exitcode: int) -> None:
        self.pid, self._polls, self._exitcode = pid, polls, exitcode

    @property
    def exitcode(self) -> int | None:
        self._polls -= 1
        return self._exitcode if self._polls < 0 else None


def test_the_exit_status_is_waited_for_up_to_its_limit_and_no_longer():
    clock = FakeClock()
    seen = _raised([_DiesLater(7, polls=5, exitcode=-signal.SIGSEGV)], ConnectionResetError())
    assert killed_in_handover(seen, clock, clock.advance) == (
        "DataLoader worker (pid 7) killed by SIGSEGV (Segmentation fault)")
    assert clock.now == 5 * DEATH_POLL_S

    clock = FakeClock()
    alive = _raised([_DiesLater(8, polls=10**6, exitcode=-9)], EOFError())
    assert killed_in_handover(alive, clock, clock.advance) is None
    assert DEATH_SEEN_WITHIN_S <= clock.now < DEATH_SEEN_WITHIN_S + 2 * DEATH_POLL_S


def test_a_worker_the_loader_stopped_is_named_only_when_none_other_was_killed():
    clock = FakeClock()
    both = [_DiesLater(1, 0, -signal.SIGTERM), _DiesLater(2, 0, -signal.SIGBUS)]
    assert "pid 2) killed by SIGBUS" in (killed_in_handover(_raised(both, EOFError()), clock, clock.advance) or "")
    stopped = [_DiesLater(1, 0, -signal.SIGTERM), _DiesLater(2, 0, 0)]
    assert "pid 1) killed by SIGTERM" in (killed_in_handover(_raised(stopped, EOFError()), clock, clock.advance) or "")


def test_other_errors_and_errors_outside_a_loader_are_left_as_they_were():
    clock = FakeClock()
    assert killed_in_handover(_raised([_DiesLater(1, 0, -9)], ValueError("bad")), clock, clock.advance) is None
    assert describe(_raised([], ConnectionResetError(104, "Connection reset by peer"))) == (
        "ConnectionResetError: [Errno 104] Connection reset by peer")
    # A dataset's own broken connection, re-raised from a worker: described as it is, at once.
    reraised = ConnectionResetError("Caught ConnectionResetError in DataLoader worker process 0.\n"
                                    "Original Traceback (most recent call last):\n  File \"data.py\", line 3\n"
                                    "ConnectionResetError: [Errno 104] Connection reset by peer")
    assert killed_in_handover(_raised([_DiesLater(1, 10, -9)], reraised), clock, clock.advance) is None
    assert clock.now == 0.0
