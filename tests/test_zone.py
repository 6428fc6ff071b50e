"""Selection at the machine's resolution: the indifference zone, the bounds the physics gives, the
baseline kept unless a change is shown to pay, and the race run on made-up processes whose true
throughputs are known (seeded: the same draws each run, so the rates below are exact)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadtune.asked.trials import BASELINE, cost_of
from loadtune.decide.selection import Z_ONE_SIDED, Scored, gain_bound, pick, race_step, resolution, shown_ahead, zone
from loadtune.record.interval import Interval

DRAWS = 2000


def test_the_zone_is_the_tolerance_or_what_the_repeats_resolve_the_larger():
    assert resolution(None, 3) == 0.0 and zone(0.03, None, 3) == 0.03
    assert resolution(0.04, 3) == pytest.approx(Z_ONE_SIDED * 0.04 * math.sqrt(2 / 3))
    assert zone(0.03, 0.04, 3) == pytest.approx(0.0537, abs=1e-4), "4% between processes, 3 repeats"
    assert zone(0.03, 0.01, 3) == 0.03, "a quiet machine resolves less than the tolerance"
    assert zone(0.03, 0.08, 12) == pytest.approx(Z_ONE_SIDED * 0.08 * math.sqrt(2 / 12))


def measured(name: str, throughput: float, wait: float = 0.3, workers: int = 1, repeats: int = 3,
             spread: float = 0.0, seed: int = 0) -> Scored:
    """A trial with a known mean; its draws spread `spread` (log sd of its mean)."""
    rng = np.random.default_rng(seed)
    draws = throughput * np.exp(spread * rng.standard_normal(DRAWS)) if spread else np.full(DRAWS, throughput)
    waits = np.clip(wait + 0.01 * rng.standard_normal(DRAWS), 0, 1)
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return Scored(name, Interval(throughput, float(lo), float(hi)), Interval(wait, max(0.0, wait - 0.02),
                                                                              min(1.0, wait + 0.02)),
                  draws, waits, repeats, cost_of({"num_workers": workers}))


def test_a_config_with_wait_ratio_w_can_gain_at_most_one_over_one_minus_w():
    held_out = measured("baseline", 100.0, wait=0.027)
    # The upper end of the wait ratio's interval (0.047) bounds it: 1 / (1 - 0.047) - 1.
    assert gain_bound(held_out) == pytest.approx(1 / (1 - 0.047) - 1)
    ideal = Scored("ideal", Interval(102.0, 101.5, 102.5), Interval(0.0, 0.0, 0.01))
    assert gain_bound(held_out, ideal) == pytest.approx(102.5 / held_out.measured_throughput.lo - 1)
    assert gain_bound(measured("w", 100.0, wait=1.0)) == math.inf


def test_nothing_left_to_gain_beyond_the_zone_ends_the_race_at_once():
    items = [measured(BASELINE, 100.0, wait=0.01, workers=0, repeats=1, spread=0.04, seed=1),
             measured("w2", 101.0, wait=0.01, workers=2, repeats=1, spread=0.04, seed=2),
             measured("w3", 102.0, wait=0.01, workers=3, repeats=1, spread=0.04, seed=3)]
    step = race_step(items, 0.03, max_repeats=3, spread=0.04)
    assert step.decided and step.again == () and step.undecided == ()
    assert step.pick == BASELINE, "of the equals, the cheapest: the baseline"
    assert step.bound < step.zone


def test_the_baseline_stays_unless_a_change_is_shown_faster_by_more_than_the_zone():
    # A saturated machine: 4 workers measured 0.1% ahead of the baseline, then one 2.6% ahead.
    base = measured(BASELINE, 2224.7, workers=0, spread=0.03, seed=4)
    four = measured("num_workers=4", 2227.4, workers=4, spread=0.03, seed=5)
    three = measured("num_workers=3", 1.026 * 2224.7, workers=3, spread=0.03, seed=6)
    width = zone(0.03, 0.04, 3)
    assert pick([four, base], width, keep=BASELINE).name == BASELINE
    assert pick([three, four, base], width, keep=BASELINE).name == BASELINE
    assert not shown_ahead(three, base, width)
    # A change shown faster, by more than the zone, is recommended.
    fast = measured("num_workers=2", 1.25 * 2224.7, workers=2, spread=0.03, seed=7)
    assert shown_ahead(fast, base, width) and pick([fast, base], width, keep=BASELINE).name == "num_workers=2"


class Machine:
    """Processes of known configs: each repeat reads the config's true log throughput plus the
    machine's spread between processes (sd `spread`, log scale)."""

    def __init__(self, truths: dict[str, float], spread: float, seed: int) -> None:
        self.truths, self.spread = truths, spread
        self.rng = np.random.default_rng(seed)
        self.seen: dict[str, list[float]] = {name: [] for name in truths}

    def repeat(self, name: str) -> None:
        self.seen[name].append(math.log(self.truths[name]) + self.spread * self.rng.standard_normal())

    def scored(self, name: str) -> Scored:
        """As the sweep scores a trial: its mean over repeats, its draws with the pooled spread
        (known here) over the root of its repeats."""
        seen = self.seen[name]
        mean = float(np.mean(seen))
        se = self.spread / math.sqrt(len(seen))
        draws = np.exp(mean + se * self.rng.standard_normal(DRAWS))
        point = math.exp(mean)
        workers = int(name.rpartition("=")[2]) if "=" in name else 0
        return Scored(name, Interval(point, point * math.exp(-2 * se), point * math.exp(2 * se)),
                      Interval(0.4, 0.38, 0.42), draws, np.full(DRAWS, 0.4), len(seen),
                      cost_of({"num_workers": workers}))


def race(machine: Machine, max_repeats: int, tolerance: float = 0.03) -> tuple[str, int]:
    """The race as the racer runs it: a repeat each, then the pick and its rival, until decided
    or at their limit. The pick, and the processes it took."""
    names = list(machine.truths)
    for name in names:
        machine.repeat(name)
    stopped: frozenset[str] = frozenset()
    for _ in range(len(names) * max_repeats):
        step = race_step([machine.scored(n) for n in names], tolerance, max_repeats, stopped=stopped,
                         spread=machine.spread)
        stopped |= frozenset(step.stop)
        if step.decided or not step.again:
            break
        for name in step.again:
            machine.repeat(name)
    assert step.pick is not None
    return step.pick, sum(len(v) for v in machine.seen.values())


def test_the_race_finds_a_best_ahead_by_more_than_the_zone_at_the_stated_rate():
    spread, repeats = 0.04, 3
    width = zone(0.03, spread, repeats)
    # The best is ahead of the rest by twice the zone; the rest are cheaper.
    truths = {BASELINE: 100.0, "num_workers=1": 104.0, "num_workers=2": 105.0,
              "num_workers=4": 105.0 * math.exp(2 * width)}
    picks = [race(Machine(truths, spread, seed), repeats)[0] for seed in range(200)]
    assert picks.count("num_workers=4") / len(picks) >= 0.95


def test_all_within_the_zone_stops_early_and_keeps_the_baseline():
    spread, repeats = 0.04, 3
    truths = {BASELINE: 100.0, "num_workers=1": 101.0, "num_workers=2": 100.5, "num_workers=3": 101.5}
    results = [race(Machine(truths, spread, seed), repeats) for seed in range(100)]
    kept = sum(chosen == BASELINE for chosen, _ in results) / len(results)
    processes = np.mean([used for _, used in results])
    assert kept >= 0.9, "no change shown to pay"
    assert processes < len(truths) * repeats, "the race ends before every config reaches its limit"


def test_a_wait_ratio_interval_stays_in_zero_to_one():
    from loadtune.decide.stats import rerun_interval

    rng = np.random.default_rng(8)
    low = rerun_interval(0.067, 0.067 + 0.05 * rng.standard_normal(DRAWS), log=False, drift_sd=0.025)
    assert low.lo == 0.0 and low.hi < 1.0, "0.067 [-0.014, 0.150] is 0.067 [0, 0.150]"
    high = rerun_interval(0.97, 0.97 + 0.05 * rng.standard_normal(DRAWS), log=False, drift_sd=0.025)
    assert high.hi == 1.0 and high.lo > 0.0
