"""The training run's figures from windows that may cut epochs (loadtune.record.run_epochs): exact
arithmetic on made-up windows, and a real DataLoader whose sampler ends each epoch as the
dataset's end does."""

from __future__ import annotations

import math

import pytest

from loadtune.decide.stats import ProcessNoise, summarize
from loadtune.record.measurement import LoaderEpochs, Measurement, TrialStart, Window
from loadtune.record.run_epochs import RunEpochs, run_epochs, run_figures


def window(periods, starts, epoch_pos=0, wait_share=0.5, samples=8) -> Window:
    n = len(periods)
    return Window(tuple(p * wait_share for p in periods), (0.0,) * n, tuple(p * (1 - wait_share) for p in periods),
                  (samples,) * n, tuple(starts), epoch_pos=epoch_pos)


def test_places_in_the_epoch_follow_the_starts():
    w = window([1.0] * 6, [False, False, True, False, False, False], epoch_pos=5)
    assert w.positions() == (5, 6, 0, 1, 2, 3)
    unknown = window([1.0] * 3, [False, True, False], epoch_pos=None)
    assert unknown.positions() == (None, 0, 1)


def test_whole_epochs_of_the_runs_length_give_the_windows_own_figures():
    # Epochs of 4 batches, the first 0.5 s, the rest 0.1 s; the window holds two whole epochs.
    periods = [0.5, 0.1, 0.1, 0.1] * 2
    m = Measurement(TrialStart(0.1), (window(periods, [True, False, False, False] * 2),),
                    epochs=LoaderEpochs(dataset_batches=4, window_epoch_batches=4))
    assert run_epochs(m) == RunEpochs(4.0, 2)
    (figures,) = run_figures(m)
    assert figures.throughput == pytest.approx(8 * 8 / sum(periods))
    assert figures.wait_ratio == pytest.approx(0.5)


def test_a_cut_epochs_start_is_weighed_by_the_runs_epoch():
    # Cut at 8 batches; the run's epoch is 32. Early places 0-3: 0.9, 0.3, 0.1, 0.1 s; steady 0.1 s.
    epoch = [0.9, 0.3, 0.1, 0.1] + [0.1] * 4
    m = Measurement(TrialStart(0.1), (window(epoch * 2, ([True] + [False] * 7) * 2),),
                    epochs=LoaderEpochs(dataset_batches=32, window_epoch_batches=8))
    (figures,) = run_figures(m)
    period = (0.9 + 0.3 + 0.1 + 0.1 + (32 - 4) * 0.1) / 32
    assert figures.period_s == pytest.approx(period)
    assert figures.throughput == pytest.approx(8 / period)
    assert figures.throughput > 8 / (sum(epoch) / 8), "the window, cut at 8, weighs the start four times as much"
    stated = run_figures(m, stated=800)[0]
    assert stated.period_s == pytest.approx((1.4 + (800 - 4) * 0.1) / 800), "measure.run_epoch_batches rules"


def test_a_window_that_misses_an_early_place_takes_it_from_the_others():
    # Epochs cut at 8 batches (early places 0-3), the run's of 16. The first window holds places
    # 0-7; the second starts at place 2 and holds places 2-7, then 0-1 of the next epoch; the
    # third holds places 5-7 alone.
    first = window([0.9, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], [True] + [False] * 7)
    second = window([0.1] * 6 + [0.7, 0.5], [False] * 6 + [True, False], epoch_pos=2)
    third = window([0.1] * 3, [False] * 3, epoch_pos=5)
    m = Measurement(TrialStart(0.1), (first, second, third),
                    epochs=LoaderEpochs(dataset_batches=16, window_epoch_batches=8))
    one, two, three = run_figures(m)
    assert one.period_s == pytest.approx((0.9 + 0.3 + 0.1 + 0.1 + 12 * 0.1) / 16)
    assert two.period_s == pytest.approx((0.7 + 0.5 + 0.1 + 0.1 + 12 * 0.1) / 16)
    # No early place of its own: each is the others' mean (0.8, 0.4, 0.1, 0.1).
    assert three.period_s == pytest.approx((0.8 + 0.4 + 0.1 + 0.1 + 12 * 0.1) / 16)


def test_an_epoch_longer_than_the_windows_costs_its_first_batch_where_workers_start_again():
    # No start in the window (epochs of 500 batches); the trial's first batch waited 2.1 s, a
    # steady batch 0.1 s: workers started again every epoch cost 2.0 s an epoch.
    steady = window([0.2] * 10, [False] * 10, epoch_pos=3)
    restarting = Measurement(TrialStart(2.1), (steady,),
                             epochs=LoaderEpochs(dataset_batches=500, window_epoch_batches=500, restarts_workers=True))
    assert run_epochs(restarting) == RunEpochs(500.0, 0, pytest.approx(2.0))
    assert run_figures(restarting)[0].period_s == pytest.approx(0.2 + 2.0 / 500)
    assert run_figures(restarting)[0].wait_ratio == pytest.approx((0.1 + 2.0 / 500) / (0.2 + 2.0 / 500))
    persistent = Measurement(TrialStart(2.1), (steady,),
                             epochs=LoaderEpochs(dataset_batches=500, window_epoch_batches=500))
    assert run_figures(persistent)[0].throughput == pytest.approx(8 / 0.2), "a resume adds nothing measurable"


def test_without_a_length_known_the_steady_state_alone():
    stream = Measurement(TrialStart(0.1), (window([0.6, 0.2, 0.2, 0.2], [True, False, False, False]),))
    assert run_epochs(stream) == RunEpochs(math.inf, 1)
    assert run_figures(stream)[0].throughput == pytest.approx(8 / 0.2), "no length: no start weighed in"


def test_the_trials_throughput_is_the_runs_and_the_windows_is_kept_beside_it():
    epoch = [0.9, 0.3, 0.1, 0.1] + [0.1] * 4
    m = Measurement(TrialStart(0.1), tuple(window(epoch, [True] + [False] * 7) for _ in range(3)),
                    epochs=LoaderEpochs(dataset_batches=32, window_epoch_batches=8))
    stats = summarize(m, noise=ProcessNoise(0.0, 0.0, 10), drift=None)  # processes that never differ
    assert stats.throughput.mean == pytest.approx(8 / ((1.4 + 28 * 0.1) / 32))
    assert stats.window_throughput == pytest.approx(8 * 8 / sum(epoch))
    assert stats.run_epoch_batches == 32
    assert stats.throughput.lo == pytest.approx(stats.throughput.mean), "three identical processes"


@pytest.mark.slow  # a real DataLoader with 2 worker processes
def test_a_sampler_cut_ends_the_epoch_as_the_datasets_end_does():
    """Cut at 3 batches: each epoch hands out exactly 3 batches of indices (none prefetched past
    the cut, so persistent workers have nothing to drain) and the DataLoader stops there."""
    import torch
    from torch.utils.data import DataLoader

    from loadtune.trial_process.sampled import recording

    data = torch.arange(40)
    kwargs, recorder = recording(data, {"batch_size": 2, "num_workers": 2, "prefetch_factor": 4,
                                        "persistent_workers": True})
    assert recorder is not None
    recorder.cut = 3
    loader = DataLoader(data, **kwargs)
    epochs = [[b.tolist() for b in loader] for _ in range(2)]
    assert [len(e) for e in epochs] == [3, 3]
    assert epochs[0] == epochs[1] == [[0, 1], [2, 3], [4, 5]]
    assert [len(e.indices) for e in recorder.epochs()] == [6, 6]
    assert [e.complete for e in recorder.epochs()] == [False, False] and recorder.epochs()[0].size == 40
