"""A rank that stalls is named with its phase and Python stack, within its limit, and a stall
before the first batch is tried once more on a fresh rendezvous: the rules on made-up phases,
then real gloo ranks, one stalled in each phase by the user's own code (tests/rank_parts.py),
or, before its group is formed where no user code runs, by the test hook."""

from __future__ import annotations

import faulthandler
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from loadtune.trial_process.phases import (
    LIMITS_VAR,
    TEST_STALL_VAR,
    Found,
    RankState,
    Stall,
    StallLimits,
    find_stall,
    split_phase,
)
from loadtune.trial_process.stacks import Frame, condense, stack_line
from tests.conftest import MARKER_VAR, run_cli, tiny_config

ROOT = Path(__file__).resolve().parents[1]
PARTS = str(Path(__file__).with_name("rank_parts.py"))
LIMIT_S = 5.0  # every stall limit in the real runs below (LIMITS_VAR)
# How much later than its limit a stall may be reported: the watch reads the phases every 0.5 s
# and takes the stack in well under a second; the rest is room for a busy machine (how soon is
# benchmarks/ranks_stress.py's to measure: here, only that the watch, not the timeout, ended it).
MARGIN_S = 20.0


# --- the rules, on made-up phases ----------------------------------------------------------


def state(rank, phase="window 1", moved_at=0.0, waiting=False, returned=False) -> RankState:
    return RankState(rank, 1000 + rank, 0, phase, moved_at, waiting, returned)


LIMITS = StallLimits(start_s=60.0, other_s=20.0)


def everyone(pid: int) -> bool:
    return True


def test_the_rank_that_neither_moves_nor_waits_is_the_stalled_one():
    """Rank 0 waits in the all_reduce for rank 1, which is stuck in its step: rank 1 is named."""
    states = [state(0, waiting=True), state(1, moved_at=0.5)]
    assert find_stall(states, everyone, now=20.0, limits=LIMITS) is None
    found = find_stall(states, everyone, now=21.0, limits=LIMITS)
    assert found is not None and [s.rank for s in found.ranks] == [1] and not found.each_waiting
    assert found.idle_s == pytest.approx(20.5) and found.limit_s == 20.0
    assert not found.before_first_batch


def test_a_moving_rank_is_not_stalled_however_long_the_others_wait():
    states = [state(0, waiting=True, moved_at=0.0), state(1, moved_at=99.0)]
    assert find_stall(states, everyone, now=100.0, limits=LIMITS) is None


def test_phases_before_the_first_batch_have_the_longer_limit():
    states = [state(0, "setup", waiting=True), state(1, "setup")]
    assert find_stall(states, everyone, now=59.0, limits=LIMITS) is None
    found = find_stall(states, everyone, now=61.0, limits=LIMITS)
    assert found is not None and found.ranks[0].rank == 1 and found.before_first_batch


def test_ranks_all_waiting_for_each_other_are_named_together():
    states = [state(0, "warm-up", waiting=True, moved_at=1.0), state(1, "window 1", waiting=True)]
    assert find_stall(states, everyone, now=20.5, limits=LIMITS) is None  # rank 0 waits 19.5 s
    found = find_stall(states, everyone, now=21.5, limits=LIMITS)
    assert found is not None and found.each_waiting and [s.rank for s in found.ranks] == [0, 1]


def test_a_rank_done_waits_for_the_others_until_all_are_then_must_exit():
    """Done ranks wait for the launcher; once all are done, one that does not exit is stalled."""
    one_done = [state(0, "teardown", returned=True), state(1, "window 1", moved_at=5.0)]
    assert find_stall(one_done, everyone, now=24.0, limits=LIMITS, world=2) is None
    assert find_stall(one_done, everyone, now=26.0, limits=LIMITS, world=2).ranks[0].rank == 1
    both_done = [state(0, "teardown", returned=True, moved_at=3.0), state(1, "teardown", returned=True, moved_at=4.0)]

    def only_rank_1(pid: int) -> bool:
        return pid == 1001

    assert find_stall(both_done, only_rank_1, now=23.5, limits=LIMITS, world=2) is None  # 19.5 s since all were
    found = find_stall(both_done, only_rank_1, now=24.5, limits=LIMITS, world=2)
    assert found is not None and found.ranks[0].rank == 1 and found.ranks[0].phase == "teardown"
    assert find_stall(both_done, lambda pid: False, now=1000.0, limits=LIMITS, world=2) is None  # both exited


def test_a_rank_that_never_started_is_named_by_those_waiting_for_it():
    states = [state(0, "rendezvous", waiting=True)]
    found = find_stall(states, everyone, now=61.0, limits=LIMITS, world=2)
    assert found is not None and found.each_waiting and found.missing == (1,)
    assert Stall(found, {0: "at f (a.py:1)"}, None).reason() == (
        "rank 0 stalled in rendezvous for 61.0 s (limit 60 s), waiting for rank 1, which never started: at f (a.py:1)")


def test_the_reason_is_one_line_naming_rank_phase_time_and_stack():
    one = Found((state(1, "window 2"),), 20.4, 20.0, False)
    stall = Stall(one, {1: "at step (my_step.py:12) <- run (loop.py:3)"}, "/tmp/s.txt")
    assert stall.reason() == ("rank 1 stalled in window 2 for 20.4 s (limit 20 s): at step (my_step.py:12) "
                              "<- run (loop.py:3); stacks in /tmp/s.txt")
    first = Stall(Found((state(0, "first batch"),), 3.26, 3.0, False), {0: "at g (b.py:2)"}, None)
    assert first.found.before_first_batch and first.reason(retried=True) == (
        "rank 0 stalled in first batch for 3.3 s (limit 3 s), again after a retry on a fresh rendezvous: at g (b.py:2)")
    both = Found((state(0, "warm-up", waiting=True), state(1, "window 1", waiting=True)), 31.0, 30.0, True)
    assert Stall(both, {0: "at agree (ranks.py:9)", 1: "at step_and_reduce (ranks.py:7)"}, None).reason() == (
        "ranks 0 (warm-up) and 1 (window 1) stalled for 31.0 s (limit 30 s), each waiting for the others in a "
        "collective: rank 0 at agree (ranks.py:9); rank 1 at step_and_reduce (ranks.py:7)")


def test_limits_are_a_share_of_the_trial_timeout_at_most_and_tests_may_set_them():
    assert StallLimits.for_timeout(300, environ={}) == StallLimits(100.0, 30.0)
    assert StallLimits.for_timeout(180, environ={}) == StallLimits(60.0, 30.0)
    assert StallLimits.for_timeout(1000, environ={}) == StallLimits(120.0, 30.0)
    assert StallLimits.for_timeout(300, environ={LIMITS_VAR: "4,2"}) == StallLimits(4.0, 2.0)
    assert StallLimits.for_timeout(9, environ={LIMITS_VAR: "5"}) == StallLimits(3.0, 3.0)
    assert split_phase("window 12") == ("window", 12) and split_phase("first batch") == ("first batch", 0)


def _sleeps_here(ready: threading.Event) -> None:
    ready.set()
    time.sleep(30)


def test_a_dump_of_every_thread_gives_the_main_threads_stack_in_one_line(tmp_path):
    """A real faulthandler dump of this process, its main thread found by its ident."""
    ready = threading.Event()
    threading.Thread(target=_sleeps_here, args=(ready,), daemon=True).start()
    ready.wait()
    path = tmp_path / "dump"
    with path.open("w") as f:
        faulthandler.dump_traceback(f, all_threads=True)
    line = stack_line(path.read_text(), threading.get_ident())
    here = "test_a_dump_of_every_thread_gives_the_main_threads_stack_in_one_line"
    assert line.startswith(f"at {here} (test_rank_stalls.py:")
    assert "_sleeps_here" not in line


def test_library_frames_give_way_to_the_users_innermost_frame():
    lib = os.path.dirname(os.__file__)
    frames = [Frame(f"f{i}", f"{lib}/queue.py", i) for i in range(6)] + [Frame("mine", "/home/me/train.py", 7),
                                                                           Frame("main", "/home/me/run.py", 1)]
    assert condense(frames) == "at f0 (queue.py:0) <- f1 (queue.py:1) <- f2 (queue.py:2) <- f3 (queue.py:3) " \
                               "<- ... <- mine (train.py:7)"
    assert condense(frames[4:]) == "at f4 (queue.py:4) <- f5 (queue.py:5) <- mine (train.py:7) <- main (run.py:1)"
    assert condense([]) == "no Python frame"


# --- real ranks --------------------------------------------------------------------------------


def stall_config(dataset: dict | None = None, step: dict | None = None, **loader) -> dict:
    """Two cheap ranks (0.2 ms a sample, batch 8, 5 ms steps), the trial's timeout far above
    every limit: a stall is reported by the watch, never by the timeout."""
    cheap = {"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 400, "cost_s": 0.0002}}
    config = tiny_config(
        dataset=dataset or cheap,
        loader={"batch_size": 8, "num_workers": 1, **loader},
        sweep={},
        step=step or {"factory": f"{PARTS}:rank_step", "kwargs": {"sleep_s": {0: 0.005, 1: 0.005}}},
        measure={"warmup_batches": 2, "batches": 20, "repeats": 1, "timeout_s": 120},
    )
    return config


TRIAL = """
import json, multiprocessing, os, sys
from loadtune.asked.config import load_config
from loadtune.sweep_process.launch import run_in_trial_process
from loadtune.asked.plan import baseline_trial
from loadtune.trial_process.jobs import TrialJob
spec = load_config(sys.argv[1])
cfg = spec.config
job = TrialJob(baseline_trial(cfg), cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir), os.getpid(),
               multiprocessing.get_start_method(), ranks=2, scratch=sys.argv[2])
out = run_in_trial_process(job, cfg.measure.timeout_s)
sampled = bool(out.result.resources) if out.result is not None else None
print(json.dumps({"status": out.status, "reason": out.reason, "wall_s": out.wall_s, "sampled": sampled}))
"""


def run_trial(config: dict, tmp_path: Path, marker: str, stall: str | None = None) -> dict:
    """The config's baseline on 2 ranks, in a trial process as a sweep runs it (no preflight, no
    other trial), every stall limit LIMIT_S: its status, reason and wall time."""
    path = tmp_path / "stall.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, LIMITS_VAR: f"{LIMIT_S},{LIMIT_S}", MARKER_VAR: marker, "TMPDIR": str(tmp_path)}
    env.pop(TEST_STALL_VAR, None)
    if stall:
        env[TEST_STALL_VAR] = stall
    result = subprocess.run([sys.executable, "-c", TRIAL, str(path), str(scratch)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


REPORTED = re.compile(r"^rank (\d) stalled in (.+?) for ([\d.]+) s \(limit ([\d.]+) s\)(, again after a retry "
                      r"on a fresh rendezvous)?: at (.+); stacks in (\S+)$")


def assert_stall(outcome: dict, rank: int, phase: str, frames: list[str], retried: bool) -> None:
    """Failed (not timed out) with one line naming the rank, the phase and frames of its stack,
    reported within its limit and MARGIN_S; its whole stacks kept in a file."""
    assert outcome["status"] == "failed", outcome
    reason = outcome["reason"]
    assert "\n" not in reason
    found = REPORTED.match(reason)
    assert found, reason
    assert int(found.group(1)) == rank and found.group(2) == phase, reason
    assert LIMIT_S <= float(found.group(3)) < LIMIT_S + MARGIN_S, reason  # rounded to 0.1 s
    assert float(found.group(4)) == LIMIT_S
    assert bool(found.group(5)) == retried, reason
    for frame in frames:
        assert frame in found.group(6), reason
    assert f"rank {rank} (pid" in Path(found.group(7)).read_text()
    attempts = 2 if retried else 1
    assert outcome["wall_s"] < attempts * (LIMIT_S + MARGIN_S) + 30, outcome  # far from the 120 s timeout


@pytest.mark.slow
def test_a_rank_stalled_before_its_group_is_formed_is_named_and_retried_once(tmp_path, marker):
    outcome = run_trial(stall_config(), tmp_path, marker, stall="1:rendezvous:3600")
    assert_stall(outcome, 1, "rendezvous", ["injected_stall (phases.py:", "join_group (ranks.py:"], retried=True)


@pytest.mark.slow
def test_a_rank_whose_dataset_never_builds_is_named_in_setup(tmp_path, marker):
    dataset = {"factory": f"{PARTS}:slow_to_build", "kwargs": {"num_samples": 400}}
    outcome = run_trial(stall_config(dataset), tmp_path, marker)
    assert_stall(outcome, 1, "setup", ["stall_forever (rank_parts.py:", "slow_to_build (rank_parts.py:"],
                 retried=True)


@pytest.mark.slow
def test_a_rank_whose_first_item_never_comes_is_named_in_first_batch(tmp_path, marker):
    dataset = {"factory": f"{PARTS}:first_item_hangs", "kwargs": {"num_samples": 400}}
    outcome = run_trial(stall_config(dataset, num_workers=0), tmp_path, marker)
    assert_stall(outcome, 1, "first batch", ["stall_forever (rank_parts.py:", "__getitem__ (rank_parts.py:"],
                 retried=True)


@pytest.mark.slow
def test_a_rank_whose_step_never_ends_is_named_in_its_window(tmp_path, marker):
    step = {"factory": f"{PARTS}:rank_step", "kwargs": {"sleep_s": {0: 0.005, 1: 0.005}, "stall_rank": 1,
                                                         "stall_at": 10}}
    outcome = run_trial(stall_config(step=step), tmp_path, marker)
    assert_stall(outcome, 1, "window 1", ["stall_forever (rank_parts.py:", "step (rank_parts.py:"], retried=False)


@pytest.mark.slow
def test_a_rank_that_cannot_exit_is_named_in_teardown(tmp_path, marker):
    """A thread that never ends and is no daemon holds the rank's exit: its stack is named too."""
    dataset = {"factory": f"{PARTS}:keeps_a_thread", "kwargs": {"num_samples": 400}}
    outcome = run_trial(stall_config(dataset), tmp_path, marker)
    assert_stall(outcome, 1, "teardown", ["_shutdown (threading.py:", "waiting for its other threads to end: at "
                                          "stall_forever (rank_parts.py:"], retried=False)


@pytest.mark.slow
def test_a_stall_before_the_first_batch_that_does_not_come_again_is_measured(tmp_path, marker):
    """Rank 1's first item hangs the first time only; rank 0, its first batch in, had asked the
    sweep to sample: the fresh launch measures the trial, sampled anew."""
    once = tmp_path / "read"
    dataset = {"factory": f"{PARTS}:first_item_hangs", "kwargs": {"num_samples": 400, "once": str(once)}}
    outcome = run_trial(stall_config(dataset, num_workers=0), tmp_path, marker)
    assert outcome["status"] == "ok" and outcome["sampled"], outcome
    assert len(once.read_text().splitlines()) == 2, "rank 1 read its first item twice: stalled, then on the retry"
    assert LIMIT_S < outcome["wall_s"] < LIMIT_S + MARGIN_S + 30


@pytest.mark.slow
def test_a_sweeps_row_gives_the_stall_as_its_reason(tmp_path, write_config, marker, monkeypatch):
    """Through the command line: the row's reason is the same one line."""
    monkeypatch.setenv(LIMITS_VAR, f"{LIMIT_S},{LIMIT_S}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    step = {"factory": f"{PARTS}:rank_step", "kwargs": {"sleep_s": {0: 0.005, 1: 0.005}, "stall_rank": 1,
                                                         "stall_at": 10}}
    out = tmp_path / "stall.csv"
    result = run_cli("sweep", str(write_config(stall_config(step=step))), "--ranks", "2", "--out", str(out),
                     marker=marker)
    # The baseline, the one trial, failed: one `Error:` line naming it, exit 1, its row in the CSV.
    assert result.returncode == 1 and "Error: no trial ran successfully" in result.stderr, result.stderr[-3000:]
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "failed"
    assert REPORTED.match(row.reason) and row.reason.startswith("rank 1 stalled in window 1 for "), row.reason
    assert "stall_forever (rank_parts.py:" in row.reason
