from __future__ import annotations

import numpy as np
import pytest

from loadtune.decide.ranking import rank
from loadtune.decide.selection import Scored
from loadtune.decide.stats import MACHINE_DRIFT, PRIOR, ProcessNoise, pooled_noise, summarize
from loadtune.record.interval import Interval
from loadtune.record.measurement import Measurement, TrialStart, Window


def window(wait, step, samples=8, starts=None):
    n = len(wait)
    return Window(tuple(wait), (0.0,) * n, tuple(step), (samples,) * n, tuple(starts or (False,) * n))


def test_single_window_single_batch_has_a_point_interval():
    stats = summarize(Measurement(TrialStart(0.1), (window([0.01], [0.03]),)))
    assert stats.wait_ratio == Interval(0.25, 0.25, 0.25)
    assert stats.throughput.mean == pytest.approx(200.0)
    assert stats.repeats == 1 and stats.batches == 1


QUIET = ProcessNoise(throughput_log_sd=0.0, wait_ratio_sd=0.0, dof=10)  # processes that never differ


def test_zero_spread_gives_zero_width():
    windows = tuple(window([0.02] * 10, [0.02] * 10) for _ in range(6))
    stats = summarize(Measurement(TrialStart(0.1), windows), noise=QUIET, drift=None)
    assert stats.wait_ratio.lo == pytest.approx(0.5) == stats.wait_ratio.hi
    assert not stats.noisy


def test_mean_over_repeats_and_a_covering_interval():
    rng = np.random.default_rng(1)
    windows = tuple(window(rng.uniform(0.005, 0.015, 20), [0.03] * 20) for _ in range(8))
    stats = summarize(Measurement(TrialStart(0.1), windows))
    per_repeat = [sum(w.wait_s) / (sum(w.wait_s) + sum(w.step_s)) for w in windows]
    assert stats.wait_ratio.mean == pytest.approx(np.mean(per_repeat))
    assert stats.wait_ratio.lo < stats.wait_ratio.mean < stats.wait_ratio.hi


def test_p95_of_wait():
    # 100 counted batches in two windows: 90 waits of 1 ms and 10 of 50 ms, all the long ones
    # in the second window. The 95th percentile of the 100 waits lies among the ten 50 ms
    # ones (whatever the interpolation); a per-window figure would differ (1 ms and 50 ms).
    first = window([0.001] * 50, [0.01] * 50)
    second = window([0.001] * 40 + [0.050] * 10, [0.01] * 50)
    stats = summarize(Measurement(TrialStart(0.1), (first, second)))
    assert stats.times.wait_p95_ms == pytest.approx(50.0)
    assert stats.times.wait_ms == pytest.approx((90 * 1 + 10 * 50) / 100)


def test_p95_of_wait_leaves_out_the_few_longest():
    # 3 waits of 200 ms in 100: fewer than 5%, so the 95th percentile is the 1 ms of the rest,
    # while the mean is pulled up to 6.97 ms.
    waits = [0.001] * 60 + [0.200] * 3 + [0.001] * 37
    stats = summarize(Measurement(TrialStart(0.1), (window(waits, [0.01] * 100),)))
    assert stats.times.wait_p95_ms == pytest.approx(1.0)
    assert stats.times.wait_ms == pytest.approx(6.97)


def scored(name, mean, half):
    return Scored(name, Interval(mean, mean - half, mean + half), Interval(0.5, 0.5 - half / 1000, 0.5 + half / 1000))


def test_ties_are_shown_within_the_tolerance_and_share_the_leaders_rank():
    items = [scored("a", 100, 0.5), scored("b", 99, 0.5), scored("c", 90, 0.5), scored("d", 89, 0.5),
             scored("e", 50, 0.5), Scored("skipped", None, None)]
    placings = rank(items, tolerance=0.03)
    # b: at least 98.5 / 100.5 = 0.980 of a, shown within 3%; d likewise of c, which is not of a.
    assert {k: v.rank for k, v in placings.items()} == {"a": 1, "b": 1, "c": 3, "d": 3, "e": 5}
    assert [k for k, v in placings.items() if v.tied_with_best] == ["a", "b"]
    assert "skipped" not in placings


def test_overlapping_intervals_that_cannot_be_told_apart_are_not_a_tie():
    # 97 ± 5 overlaps 100 ± 5, but could be 12% slower: undecided, not tied.
    placings = rank([scored("a", 100, 5), scored("b", 97, 5)], tolerance=0.03)
    assert (placings["b"].rank, placings["b"].tied_with_best) == (2, False)
    assert rank([scored("a", 100, 5), scored("b", 97, 5)], tolerance=0.15)["b"].tied_with_best


def test_equivalence_is_measured_against_the_group_leader_not_a_chain():
    # b is within 5% of a, c within 5% of b but not of a: c starts its own group.
    items = [scored("a", 100, 0.5), scored("b", 96, 0.5), scored("c", 92, 0.5)]
    assert {k: v.rank for k, v in rank(items, tolerance=0.05).items()} == {"a": 1, "b": 1, "c": 3}


def test_rank_by_wait_ratio():
    items = [Scored("fast", Interval(100, 99, 101), Interval(0.3, 0.29, 0.31)),
             Scored("lean", Interval(80, 79, 81), Interval(0.1, 0.09, 0.11))]
    assert rank(items, "wait_ratio")["lean"].rank == 1
    assert rank(items, "throughput")["fast"].rank == 1
    with pytest.raises(ValueError):
        rank(items, "speed")


def test_epoch_starts_are_resampled_apart_from_steady_batches():
    """Each window has exactly one slow epoch start: a fact of the settings, not noise. With
    identical starts and identical steady batches the interval has no width."""
    starts = [True] + [False] * 15
    windows = tuple(window([0.3] + [0.01] * 15, [0.05] * 16, starts=starts) for _ in range(3))
    stats = summarize(Measurement(TrialStart(0.1), windows), noise=QUIET, drift=None)
    assert stats.throughput.lo == pytest.approx(stats.throughput.mean)
    assert stats.throughput.hi == pytest.approx(stats.throughput.mean)
    assert stats.times.epoch_start_ms == pytest.approx(300.0)


def steady(throughput: float, batches: int = 20) -> Window:
    """A window whose batches all take the same time: nothing in it shows any spread."""
    per_batch = 8 / throughput
    return window([0.2 * per_batch] * batches, [0.8 * per_batch] * batches)


def test_the_spread_between_processes_is_pooled_over_the_trials_with_two_repeats():
    a = Measurement(TrialStart(0.1), (steady(100.0), steady(120.0)))
    b = Measurement(TrialStart(0.1), (steady(300.0), steady(300.0), steady(330.0)))
    lone = Measurement(TrialStart(0.1), (steady(50.0),))
    noise = pooled_noise([a, b, lone])
    logs_a, logs_b = np.log([100.0, 120.0]), np.log([300.0, 300.0, 330.0])
    ss = ((logs_a - logs_a.mean()) ** 2).sum() + ((logs_b - logs_b.mean()) ** 2).sum()
    # a trial with one repeat says nothing about processes: 1 + 2 degrees of freedom, beside the prior's
    assert noise.dof == 1 + 2 + PRIOR.dof
    assert noise.throughput_log_sd == pytest.approx(np.sqrt((ss + PRIOR.dof * PRIOR.throughput_log_sd ** 2) /
                                                            (3 + PRIOR.dof)))
    # every window waits 20% of the time: the prior's spread alone, outweighed by 3 of 7
    assert noise.wait_ratio_sd == pytest.approx(PRIOR.wait_ratio_sd * np.sqrt(PRIOR.dof / (3 + PRIOR.dof)))
    assert pooled_noise([lone]) is None


def rerun_half(sd: float, t: float, repeats: int) -> float:
    """Half the log width of the interval a rerun lands in: t standard errors of a difference of
    two estimates of `repeats` processes each."""
    return t * sd * np.sqrt(2 / repeats)


def test_a_trial_with_few_repeats_gets_at_least_the_pooled_spread():
    one = Measurement(TrialStart(0.1), (steady(200.0),))
    alone = summarize(one)
    assert alone.throughput.relative_spread < 0.001, "its own batches show no spread"
    noise = ProcessNoise(throughput_log_sd=0.05, wait_ratio_sd=0.02, dof=6)
    widened = summarize(one, noise=noise, drift=None)
    assert widened.throughput.mean == alone.throughput.mean
    # The config's own draws: 5% of 200 samples/s over sqrt(1) repeat, Student's t with 6 degrees
    # of freedom (2.447 standard deviations each side, 1.96 were the spread known exactly).
    assert np.log(widened.draws.throughput / 200).std() == pytest.approx(0.05 * np.sqrt(6 / 4), rel=0.1)
    # Its interval is where a rerun's estimate lands: the difference of two such estimates.
    assert np.log(200 / widened.throughput.lo) == pytest.approx(rerun_half(0.05, 2.447, 1), rel=0.06)
    assert np.log(widened.throughput.hi / 200) == pytest.approx(rerun_half(0.05, 2.447, 1), rel=0.06)
    known = summarize(one, noise=ProcessNoise(throughput_log_sd=0.05, wait_ratio_sd=0.02, dof=10_000), drift=None)
    assert np.log(known.throughput.hi / 200) == pytest.approx(rerun_half(0.05, 1.96, 1), rel=0.06)
    guessed = summarize(one, noise=ProcessNoise(throughput_log_sd=0.05, wait_ratio_sd=0.02, dof=2), drift=None)
    assert np.log(guessed.throughput.hi / 200) == pytest.approx(rerun_half(0.05, 4.303, 1), rel=0.15), \
        "a spread pooled from two repeats' differences is barely known: t with 2 degrees of freedom"
    assert 0.0 <= widened.wait_ratio.lo < 0.2 < widened.wait_ratio.hi <= 1.0
    assert widened.wait_ratio.hi - 0.2 == pytest.approx(rerun_half(0.02, 2.447, 1), rel=0.06)
    four = summarize(Measurement(TrialStart(0.1), tuple(steady(200.0) for _ in range(4))), noise=noise, drift=None)
    assert four.throughput.relative_spread == pytest.approx(widened.throughput.relative_spread / 2, rel=0.1), \
        "the spread of a mean of 4 repeats is half that of one"
    drifting = summarize(one, noise=noise)  # the machine's drift between sweeps (MACHINE_DRIFT) added
    assert np.log(drifting.throughput.hi / 200) == pytest.approx(
        np.hypot(rerun_half(0.05, 2.447, 1), 1.96 * np.sqrt(2) * MACHINE_DRIFT.throughput_log_sd), rel=0.06)
    assert drifting.draws.throughput is not None and np.log(drifting.draws.throughput / 200).std() == \
        pytest.approx(np.log(widened.draws.throughput / 200).std()), "decisions inside a sweep need no drift"
    same = summarize(Measurement(TrialStart(0.1), tuple(steady(200.0) for _ in range(20))), drift=None)
    alone_noise = pooled_noise([Measurement(TrialStart(0.1), tuple(steady(200.0) for _ in range(20)))])
    assert alone_noise.throughput_log_sd == pytest.approx(0.05 * np.sqrt(4 / 23))
    assert same.throughput.relative_spread < 0.03, "twenty processes that agree outweigh the prior"


def test_the_interval_holds_a_reruns_estimate_as_often_as_its_level_says():
    """Made-up processes: each a config's true 200 samples/s times its own luck (8% log spread);
    a run measures a trial in 1 to 3 of them, with the spread pooled over 6 trials of 3. Across
    many pairs of runs, one run's 95% interval holds the other's estimate about 95% of the time."""
    rng = np.random.default_rng(7)
    held = pairs = 0
    for _ in range(300):
        noise_trials = [Measurement(TrialStart(0.1),
                                    tuple(steady(200.0 * np.exp(rng.normal(0, 0.08))) for _ in range(3)))
                        for _ in range(6)]
        noise = pooled_noise(noise_trials)
        repeats = int(rng.integers(1, 4))
        runs = [summarize(Measurement(TrialStart(0.1), tuple(steady(200.0 * np.exp(rng.normal(0, 0.08)))
                                                 for _ in range(repeats))), noise=noise) for _ in range(2)]
        held += runs[0].throughput.lo <= runs[1].throughput.mean <= runs[0].throughput.hi
        pairs += 1
    assert 0.90 <= held / pairs <= 0.995


def test_once_decided_every_config_within_the_zone_by_its_estimate_is_marked_equal():
    # b reads 5% behind a, within the 8% zone, but could be 15% behind: not shown within it. Once the
    # pick is decided, no repeat is left to tell them apart: b shares a's rank; c, 12% behind, does not;
    # a trial cut short (behind) never does.
    items = [scored("a", 100, 5), scored("b", 95, 8), scored("c", 88, 1), scored("cut", 99, 1)]
    plain = rank(items, tolerance=0.08, behind=frozenset({"cut"}))
    assert not plain["b"].tied_with_best
    decided = rank(items, tolerance=0.08, behind=frozenset({"cut"}), unresolved=frozenset({"a", "b", "c", "cut"}))
    assert {k: (v.rank, v.tied_with_best) for k, v in decided.items()} == \
        {"a": (1, True), "b": (1, True), "cut": (3, False), "c": (4, False)}
    stopped = rank(items, tolerance=0.08, behind=frozenset({"cut"}), unresolved=frozenset({"a", "c", "cut"}))
    assert not stopped["b"].tied_with_best, "racing stopped b (shown behind in pairs): never equal by its estimate"
