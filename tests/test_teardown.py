"""A trial's workers stop after its result is sent: the sweep has its answer first, then ends the
trial's tree (forked workers); spawned ones stop cleanly before the result, as before."""

from __future__ import annotations

import multiprocessing
import threading
import weakref

from loadtune.trial_process.channel import COUNTED_END, SweepChannel
from loadtune.trial_process.execute import _forked


class _Part:
    """Stands for a loader whose workers stop when the last reference to it goes."""


def test_a_held_part_lives_until_the_sweep_lets_go_after_the_result():
    sweep, trial = multiprocessing.Pipe()
    channel = SweepChannel(trial)
    part = _Part()
    alive = weakref.ref(part)
    channel.hold(part)
    del part
    channel.end_sampling(wait=False)  # told, not waited for
    assert sweep.recv() == COUNTED_END
    sweep.send(COUNTED_END)  # the sweep's answer comes while the trial sends its result
    sender = threading.Thread(target=channel.send_result, args=(("ok", 42),))
    sender.start()
    assert sweep.recv() == ("ok", 42)
    assert alive() is not None, "held while the sweep may still be taking its last sample"
    sweep.close()  # as the sweep does once it has ended the tree
    sender.join(5)
    assert not sender.is_alive() and alive() is None


def test_without_a_held_part_the_result_is_sent_and_nothing_waits():
    sweep, trial = multiprocessing.Pipe()
    channel = SweepChannel(trial)
    channel.send_result(("failed", "why"))  # returns at once: the sweep keeps its end open
    assert sweep.recv() == ("failed", "why")


def test_a_failure_releases_what_was_held():
    channel = SweepChannel()
    part = _Part()
    alive = weakref.ref(part)
    channel.hold(part)
    del part
    channel.release()
    assert alive() is None


def test_only_forked_workers_are_left_to_the_sweep_to_end():
    assert _forked({"num_workers": 0}, "spawn"), "no workers: nothing to stop"
    assert _forked({"num_workers": 2}, "fork")
    assert not _forked({"num_workers": 2}, "spawn"), "their semaphores are the resource tracker's"
    assert not _forked({"num_workers": 2, "multiprocessing_context": "forkserver"}, "fork")
    assert _forked({"num_workers": 2, "multiprocessing_context": multiprocessing.get_context("fork")}, "spawn")
