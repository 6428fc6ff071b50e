"""Racing inside a window: a trial clearly behind the leader ends its counted window early
(measurement.Behind, measure.Pace), driven by a fake clock: exact batch counts."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from loadtune.asked.config import IDEAL_BATCHES
from loadtune.decide.ranking import rank
from loadtune.decide.selection import Z_ONE_SIDED, Scored, behind_bar
from loadtune.decide.stats import MACHINE_DRIFT
from loadtune.measure.loop import MIN_BATCHES_FOR_MEAN, Pace, measure_loop
from loadtune.record.interval import Interval
from loadtune.record.measurement import MIN_BATCHES_BEFORE_BEHIND, Behind
from tests.conftest import run_cli, tiny_config
from tests.test_measure import FakeClock, FakeLoader, stepper


def _loop(bar: float | None, batches: int = 20, repeats: int = 2):
    """4 samples a batch, 10 ms waiting and 30 ms of step each: 100 samples/s."""
    clock = FakeClock()
    loader = FakeLoader(clock, length=1000, fetch_s=0.010)
    return measure_loop(loader, stepper(clock, 0.030), warmup_batches=2, batches=batches, repeats=repeats,
                        clock=clock, behind=Behind(bar) if bar is not None else None)


def test_a_window_ends_at_the_first_batch_whose_best_case_falls_below_the_bar():
    # Steady batches of 40 ms, 4 samples each: the best case is what the window measures, 100
    # samples/s. A bar above it ends the window after the fewest batches, one below never.
    m = _loop(101.0)
    assert m.behind
    assert len(m.windows) == 1 and len(m.windows[0]) == MIN_BATCHES_BEFORE_BEHIND
    assert m.windows[0].wait_s == pytest.approx((0.010,) * MIN_BATCHES_BEFORE_BEHIND)


def test_a_trial_within_reach_of_the_bar_runs_every_window_in_full():
    m = _loop(99.0)
    assert not m.behind
    assert [len(w) for w in m.windows] == [20, 20]
    assert [len(w) for w in _loop(None).windows] == [20, 20]


def test_the_best_case_counts_the_rest_at_the_fastest_batch_so_far():
    # 10 batches of 4 samples: a slow first (0.2 s), then 0.1 s each.
    pace = Pace(Behind(50.0), batches=10, first_place=3)
    pace.add(wait_s=0.15, busy_s=0.05, samples=4, epoch_start=False)
    for _ in range(3):
        pace.add(wait_s=0.05, busy_s=0.05, samples=4, epoch_start=False)
    assert pace.best_case_samples_per_s() == pytest.approx(40 / (0.5 + 6 * 0.1))  # 36.4
    assert pace.clearly_behind()
    assert not Pace(Behind(50.0), batches=10, first_place=0).clearly_behind()  # nothing counted yet
    pace = Pace(Behind(36.0), batches=10, first_place=3)
    for _ in range(4):
        pace.add(wait_s=0.15 if not pace.done else 0.05, busy_s=0.05, samples=4, epoch_start=False)
    assert not pace.clearly_behind()


def _alternating(bar: float, batches: int = 50) -> Pace:
    """A config whose batches of 4 samples take 0.06 s and 0.14 s in turn (40 samples/s on
    average, 67 at its fastest batch), fed batch by batch until its window ends or is behind."""
    pace = Pace(Behind(bar), batches=batches, first_place=3)
    while pace.done < batches and not pace.clearly_behind():
        pace.add(wait_s=0.01 if pace.done % 2 else 0.09, busy_s=0.05, samples=4, epoch_start=False)
    return pace


def test_from_enough_batches_the_rest_is_bounded_by_the_mean_so_far():
    pace = _alternating(bar=0.0, batches=20)
    assert pace.done == 20
    sd = 0.04 * math.sqrt(20 / 19)  # the sample spread of 0.06, 0.14, ... (20 batches)
    expected = 0.1 - (1.645 + (1.645 ** 3 + 1.645) / 4 / 19) * sd / math.sqrt(20)
    assert pace.rest_batch_s() == pytest.approx(expected)
    few = _alternating(bar=0.0, batches=MIN_BATCHES_FOR_MEAN - 1)
    assert few.rest_batch_s() == pytest.approx(0.06)  # too few for the mean: the fastest batch


def test_a_noisy_config_clearly_below_the_bar_stops_well_before_its_window_ends():
    # 10% below the bar: its fastest batches alone would keep it running to batch 39 of 50.
    behind = _alternating(bar=44.0)
    assert behind.clearly_behind() and MIN_BATCHES_FOR_MEAN <= behind.done <= 30
    # Its own mean above the bar: never stopped.
    ahead = _alternating(bar=39.0)
    assert ahead.done == 50 and not ahead.clearly_behind()


def test_a_window_that_can_still_reach_the_bar_on_its_last_batch_is_not_behind():
    # The best case of a finished window is what it measured: never "behind", whatever the bar.
    m = _loop(1e9, batches=MIN_BATCHES_BEFORE_BEHIND)
    assert not m.behind and len(m.windows) == 2


def test_the_waits_of_an_epochs_first_places_are_left_out_of_the_best_case():
    pace = Pace(Behind(100.0, early_places=2), batches=10, first_place=0)
    pace.add(wait_s=1.0, busy_s=0.03, samples=4, epoch_start=True)  # place 0: its wait left out
    pace.add(wait_s=0.5, busy_s=0.03, samples=4, epoch_start=False)  # place 1: left out
    assert pace.spent_s == pytest.approx(0.06)
    pace.add(wait_s=0.01, busy_s=0.02, samples=4, epoch_start=False)  # place 2: counted
    assert pace.spent_s == pytest.approx(0.09)
    assert pace.best_case_samples_per_s() == pytest.approx(40 / (0.09 + 7 * 0.03))
    pace.add(wait_s=2.0, busy_s=0.03, samples=4, epoch_start=True)  # a new epoch: place 0 again
    assert pace.spent_s == pytest.approx(0.12)


def test_a_window_that_holds_the_run_s_epochs_counts_every_wait():
    pace = Pace(Behind(100.0), batches=10, first_place=0)
    pace.add(wait_s=1.0, busy_s=0.03, samples=4, epoch_start=True)
    assert pace.spent_s == pytest.approx(1.03)


def test_the_bar_is_the_leader_less_the_larger_of_tolerance_and_one_process_s_resolution():
    assert behind_bar(100.0, 0.03, 0.001) == pytest.approx(100 / 1.03)
    wide = 0.05
    assert behind_bar(100.0, 0.03, wide) == pytest.approx(100 / (1 + Z_ONE_SIDED * wide * math.sqrt(2)))
    unmeasured = Z_ONE_SIDED * MACHINE_DRIFT.throughput_log_sd * math.sqrt(2)
    assert behind_bar(100.0, 0.0, None) == pytest.approx(100 / (1 + unmeasured))


def _scored(name: str, mean: float) -> Scored:
    return Scored(name, Interval(mean, mean - 0.5, mean + 0.5), Interval(0.5, 0.4995, 0.5005))


def test_a_trial_cut_short_places_by_its_figures_but_after_the_best_and_never_tied():
    # "cut" read fastest over its few batches, but its window ended clearly behind the leader.
    items = [_scored("a", 100), _scored("b", 99.5), _scored("cut", 130), _scored("cut2", 80), _scored("c", 79.5),
             _scored("d", 60)]
    placings = rank(items, tolerance=0.03, behind=frozenset({"cut", "cut2"}))
    assert list(placings) == ["a", "b", "cut", "cut2", "c", "d"]
    assert {k: v.rank for k, v in placings.items()} == {"a": 1, "b": 1, "cut": 3, "cut2": 4, "c": 4, "d": 6}
    assert [k for k, v in placings.items() if v.tied_with_best] == ["a", "b"]
    assert rank(items, tolerance=0.03)["cut"].rank == 1


WORKER_SLOW = """
import time

import torch
from torch.utils.data import Dataset, get_worker_info


class WorkerSlow(Dataset):
    '''Quick in the main process, 25 ms a sample in a worker: every config with workers is
    several times behind the baseline.'''

    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.025 if get_worker_info() is not None else 0.0005)
        return torch.zeros(4)


def make():
    return WorkerSlow()
"""


@pytest.mark.slow
def test_a_sweep_ends_the_windows_of_configs_clearly_behind_and_ranks_them_below(write_config, tmp_path, marker):
    (tmp_path / "slow_workers.py").write_text(WORKER_SLOW)
    config = tiny_config(dataset={"factory": "slow_workers.py:make"}, loader={"batch_size": 4, "num_workers": 0},
                         sweep={"num_workers": [1]},
                         measure={"warmup_batches": 2, "warmup_batches_per_worker": 0, "batches": 30, "repeats": 2,
                                  "timeout_s": 60})
    out = tmp_path / "out.csv"
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out).set_index("trial")
    base, worker = df.loc["baseline"], df.loc["num_workers=1"]
    # Its best case after 4 batches is under a fifth of the baseline's throughput, whatever the noise.
    assert worker.status == "ok" and bool(worker.stopped_early) and worker.repeats == 1
    assert MIN_BATCHES_BEFORE_BEHIND <= worker.batches < 30
    assert base.batches == 30 and not bool(worker.tied_with_best) and worker["rank"] > base["rank"]
    assert "num_workers=1 (stopped)" in result.stdout
    # The ideal (the step alone) counts a short window of its own.
    assert df.loc["ideal"].batches == IDEAL_BATCHES < 30
    # Resumed, the trial cut short is kept as measured, and still ranks below; the ideal is kept too.
    again = run_cli("sweep", str(write_config(config)), "--out", str(out), "--resume", marker=marker)
    assert again.returncode == 0, again.stderr
    resumed = pd.read_csv(out).set_index("trial")
    kept = resumed.loc["num_workers=1"]
    assert kept.started_at == worker.started_at and kept.throughput == worker.throughput
    assert bool(kept.stopped_early) and kept["rank"] > base["rank"]
    assert resumed.loc["ideal"].throughput == df.loc["ideal"].throughput


def test_the_model_is_fitted_to_trials_measured_in_full_only(tmp_path):
    from loadtune.asked.config import config_from_data
    from loadtune.asked.trials import Trial
    from loadtune.record.measurement import Measurement, TrialStart
    from loadtune.sweep_process import events
    from loadtune.sweep_process.modelling import Modelling
    from loadtune.sweep_process.trial_run import Repeat, TrialRun
    from tests.test_model import TRUTH, first_round

    records = first_round(TRUTH)
    cut = records[-1].trial
    spec = config_from_data(tiny_config(), tmp_path / "c.yaml")

    def runs(cut_short: frozenset[str]) -> dict[str, TrialRun]:
        window = Measurement(TrialStart(1.0), (), behind=True)
        return {r.trial: TrialRun(Trial(r.trial, r.settings.changed or "", None, ()), 1, record=r,
                                  done=[Repeat(window, 1.0)] if r.trial in cut_short else [])
                for r in records}

    whole = Modelling(runs(frozenset()), spec.config, events.ignore).fit()
    without = Modelling(runs(frozenset({cut})), spec.config, events.ignore).fit()
    assert whole is not None and without is not None
    fitted_to = Modelling({r.trial: run for r, run in zip(records, runs(frozenset()).values())
                           if r.trial != cut}, spec.config, events.ignore).fit()
    assert without == fitted_to and without != whole


def test_only_a_trials_first_window_may_end_early_a_repeat_the_race_asks_for_runs_whole(tmp_path, write_config):
    # The duel's configs are within the zone of each other; a slow second process of one of them
    # must not end its window early and take it out of the race: the race asked for that repeat
    # to decide between them.
    from loadtune.asked.plan import trial_for
    from loadtune.record.measurement import Measurement
    from loadtune.sweep_process.launch import Outcome
    from tests.test_decide import fake_measurement, runner_for

    truths = {"num_workers=2": 420.0, "num_workers=3": 400.0}
    jobs: list[tuple[str, int, bool]] = []

    def execute(job, timeout_s):  # type: ignore[no-untyped-def]
        name = job.trial.name
        repeat = sum(1 for n, _, _ in jobs if n == name)
        jobs.append((name, repeat, job.behind is not None))
        slow = 0.75 if (name, repeat) == ("num_workers=2", 1) else 1.0  # its second process reads slow
        m = fake_measurement(truths[name] * slow, repeat)
        cut = job.behind is not None and truths[name] * slow < job.behind.bar_samples_per_s
        return Outcome("ok", "", Measurement(m.start, m.windows, behind=cut), 0.5)

    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=4, tolerance=0.03)
    runner.execute = execute
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    runner.race()
    assert any(repeat == 0 and bar for _, repeat, bar in jobs), f"a first window may end early: {jobs}"
    assert not any(repeat > 0 and bar for _, repeat, bar in jobs), f"no later one: {jobs}"
    assert runner.runs["num_workers=2"].repeats >= 2 and not runner.runs["num_workers=2"].stopped_early


def test_a_trial_cut_short_against_a_leader_whose_figure_fell_runs_a_whole_window_again(tmp_path, write_config):
    # The leader's first process read 30% fast and set the bar that ended the other's window; once
    # its later processes bring its figure down, the one cut short is back within reach: it runs a
    # whole window in place of the cut one and contends again.
    from loadtune.asked.plan import trial_for
    from loadtune.record.measurement import Measurement
    from loadtune.sweep_process.launch import Outcome
    from tests.test_decide import fake_measurement, runner_for

    jobs: list[tuple[str, float | None]] = []

    def execute(job, timeout_s):  # type: ignore[no-untyped-def]
        name = job.trial.name
        repeat = sum(1 for n, _ in jobs if n == name)
        jobs.append((name, job.behind.bar_samples_per_s if job.behind is not None else None))
        reads = 520.0 if (name, repeat) == ("num_workers=3", 0) else 400.0
        m = fake_measurement(reads, repeat)
        cut = job.behind is not None and reads < job.behind.bar_samples_per_s
        whole = m.windows[0]
        parts = {f.name: getattr(whole, f.name)[:8] for f in dataclasses.fields(whole)
                 if len(getattr(whole, f.name) or ()) == len(whole)}
        windows = (dataclasses.replace(whole, **parts),) if cut else m.windows
        return Outcome("ok", "", Measurement(m.start, windows, behind=cut), 0.5)

    from loadtune.sweep_process import events

    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=4, tolerance=0.03)
    runner.execute = execute
    said: list[int] = []  # the repeat each of its processes is announced as (the progress line)
    runner.emit = lambda e: said.append(e.repeat) if isinstance(e, events.RunStarted) and \
        e.trial.name == "num_workers=2" else None
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    other = runner.runs["num_workers=2"]
    assert other.cut_short and other.stopped_early, f"cut against the leader's first process: {jobs}"
    runner.race()
    assert not other.cut_short and not other.stopped_early and other.repeats >= 1, jobs
    assert [bar is None for name, bar in jobs if name == "num_workers=2"][1:] == [True] * (other.repeats), \
        "its window run again, and every one after, whole"
    assert all(len(r.measurement.windows[0]) == 20 for r in other.done), "the cut window is replaced"
    assert said == [1, *range(1, other.repeats + 1)], f"the whole window is announced as repeat 1 again: {said}"
