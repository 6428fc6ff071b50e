"""The serial tests' quiet machine: a busy one fails the test naming what kept it busy."""

from __future__ import annotations

import os

import pytest

from tests import quiet_machine
from tests.quiet_machine import Load, measured_quietly, read_load, wait_for_quiet

BUSY = Load(0.9, 2, (("python", 7, 0.95), ("rsync", 8, 0.8)))


def test_a_reading_covers_the_usable_cores():
    load = read_load(0.05)
    assert load.cores == len(os.sched_getaffinity(0))
    assert 0 <= load.share <= 1.01 and len(load.busiest) <= quiet_machine.BUSIEST_SHOWN


def test_a_machine_that_never_quietens_fails_naming_the_busiest(monkeypatch):
    monkeypatch.setattr(quiet_machine, "read_load", lambda: BUSY)
    with pytest.raises(pytest.fail.Exception) as failed:
        wait_for_quiet(wait_s=0)
    assert str(failed.value) == ("the machine did not quieten within 0 s (other processes may use at most 25% of the "
                                 "cores): other processes used 90% of the 2 usable cores; busiest: python (pid 7) "
                                 "95% of a core, rsync (pid 8) 80% of a core")


def test_a_disturbed_measurement_is_measured_again_after_a_wait(monkeypatch):
    waits = []
    monkeypatch.setattr(quiet_machine, "wait_for_quiet", lambda most: waits.append(most))
    monkeypatch.setattr(quiet_machine, "read_load", lambda: BUSY)
    shares = {0: 0.6, 1: 0.1}
    assert measured_quietly(lambda attempt: attempt, shares.__getitem__) == 1
    assert waits == [quiet_machine.QUIET_SHARE], "one wait, before the second attempt"
    with pytest.raises(pytest.fail.Exception, match=r"used 60% of the cores through every repeat.*busiest: python"):
        measured_quietly(lambda attempt: 0, shares.__getitem__)
