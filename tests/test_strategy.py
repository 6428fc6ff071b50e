"""Strategies on a fake measurer with a known optimum."""

from __future__ import annotations

import pytest

from loadtune.config import Config
from loadtune.rank import Scored
from loadtune.stats import Interval
from loadtune.strategy import MAX_GREEDY_ROUNDS, run_greedy, run_grid, run_ofat, run_strategy

SWEEP = {"num_workers": [0, 1, 2, 3, 4, 6], "prefetch_factor": [1, 2, 4, 8], "persistent_workers": [False, True],
         "in_order": [True, False]}
GRID_TRIALS = 1 + 5 * 4 * 2 * 2  # num_workers=0 collapses prefetch and persistence


def config() -> Config:
    return Config.model_validate({
        "dataset": {"factory": "m:f"},
        "loader": {"batch_size": 8, "num_workers": 1, "prefetch_factor": 2},
        "sweep": SWEEP,
        "step": {"sleep_s": 0.01},
    })


def true_throughput(kw: dict) -> float:
    """Optimum: num_workers=3, prefetch_factor=4, persistent_workers=true (230 samples/s; in_order
    makes no difference, so the cheaper default stays).
    Prefetch only pays once there are enough workers: a coupling one-at-a-time search misses."""
    nw, pf, pers = kw["num_workers"], kw["prefetch_factor"] or 2, kw["persistent_workers"]
    value = 100 + 30 * min(nw, 3) - 25 * max(0, nw - 3)
    if nw >= 2 and pf == 4:
        value += 30
    if nw and pers:
        value += 10
    return float(value)


class FakeMeasurer:
    def __init__(self, half_width: float = 1.0) -> None:
        self.calls: list[tuple[list[str], int]] = []
        self.half_width = half_width

    def __call__(self, trials, round_no):
        self.calls.append(([t.name for t in trials], round_no))
        out = {}
        for t in trials:
            if t.skipped:
                out[t.name] = Scored(t.name, None, None)
                continue
            tp = true_throughput(t.loader_kwargs)
            h = self.half_width
            out[t.name] = Scored(t.name, Interval(tp, tp - h, tp + h), Interval(1 / tp, 1 / tp, 1 / tp))
        return out

    @property
    def measured(self) -> list[str]:
        return [name for names, _ in self.calls for name in names]


def best_of(visits) -> dict:
    return max((v.trial.loader_kwargs for v in visits if not v.trial.skipped), key=true_throughput)


def test_grid_measures_every_combination_once_and_finds_the_optimum():
    measurer = FakeMeasurer()
    visits = run_grid(config(), False, measurer)
    assert len(visits) == GRID_TRIALS == len(set(measurer.measured))
    assert true_throughput(best_of(visits)) == 230


def test_greedy_finds_the_optimum_with_a_third_of_the_grid():
    measurer = FakeMeasurer()
    visits = run_greedy(config(), False, measurer)
    assert true_throughput(best_of(visits)) == 230
    assert len(visits) == len(set(measurer.measured)), "nothing is measured twice"
    assert len(visits) <= GRID_TRIALS / 3
    rounds = {v.round for v in visits}
    assert max(rounds) <= MAX_GREEDY_ROUNDS and max(rounds) >= 2, "it stops after a round without gain"


def test_greedy_keeps_the_current_setting_when_the_gain_is_within_noise():
    measurer = FakeMeasurer(half_width=200.0)  # every interval overlaps: nothing is significant
    visits = run_greedy(config(), False, measurer)
    assert {v.round for v in visits} == {1}
    assert len(visits) == 1 + 5 + 3 + 1 + 1


def test_ofat_is_one_change_at_a_time_then_combined():
    measurer = FakeMeasurer()
    visits = run_ofat(config(), False, measurer)
    names = [v.trial.name for v in visits]
    assert names[0] == "baseline" and names[-1] == "combined"
    assert all(("," not in n) for n in names)
    combined = visits[-1].trial.loader_kwargs
    # One at a time from num_workers=1, prefetch 4 does not pay: combined misses it.
    assert combined["num_workers"] == 3 and combined["persistent_workers"] is True
    assert visits[-1].round == 2


def test_unknown_strategy():
    with pytest.raises(ValueError, match="strategy 'random'"):
        run_strategy("random", config(), False, FakeMeasurer())
