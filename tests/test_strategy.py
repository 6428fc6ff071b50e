"""Strategies on a fake measurer with a known optimum."""

from __future__ import annotations

import dataclasses

import pytest

from loadtune.asked.config import Config
from loadtune.asked.trials import Trial, cost_of
from loadtune.decide.selection import Scored
from loadtune.record.interval import Interval
from loadtune.sweep_process.strategy import (
    MAX_GREEDY_ROUNDS,
    Search,
    run_strategy,
    search_greedy,
    search_grid,
    search_ofat,
)

SWEEP = {"num_workers": [0, 1, 2, 3, 4, 6], "prefetch_factor": [1, 2, 4, 8], "persistent_workers": [False, True],
         "in_order": [True, False]}
GRID_TRIALS = 1 + 5 * 4 * 2 * 2  # num_workers=0 collapses prefetch and persistence


def config(loader: dict | None = None, sweep: dict | None = None) -> Config:
    return Config.model_validate({
        "dataset": {"factory": "m:f"},
        "loader": loader or {"batch_size": 8, "num_workers": 1, "prefetch_factor": 2},
        "sweep": sweep or SWEEP,
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
    def __init__(self, half_width: float = 1.0, truth=true_throughput) -> None:
        self.calls: list[tuple[list[Trial], int]] = []
        self.half_width = half_width
        self.truth = truth

    def __call__(self, trials, round_no):
        self.calls.append((list(trials), round_no))
        out = {}
        for t in trials:
            if t.skipped:
                out[t.name] = Scored(t.name, None, None)
                continue
            tp = self.truth(t.loader_kwargs)
            h = self.half_width
            out[t.name] = Scored(t.name, Interval(tp, tp - h, tp + h), Interval(1 / tp, 1 / tp, 1 / tp),
                                 repeats=1, cost=cost_of(t.loader_kwargs))
        return out

    @property
    def measured(self) -> list[str]:
        return [t.name for trials, _ in self.calls for t in trials]

    @property
    def visits(self) -> list[Visit]:
        """Each trial the strategy asked for, with the round that asked for it."""
        return [Visit(t, round_no) for trials, round_no in self.calls for t in trials]


@dataclasses.dataclass(frozen=True)
class Visit:
    trial: Trial
    round: int


def visits_of(strategy, config: Config, measurer: FakeMeasurer) -> list[Visit]:
    """Run the strategy on the fake measurer; what it asked for, round by round."""
    strategy(Search(config, False, measurer))
    return measurer.visits


def best_of(visits) -> dict:
    return max((v.trial.loader_kwargs for v in visits if not v.trial.skipped), key=true_throughput)


def test_grid_measures_every_combination_once_and_finds_the_optimum():
    measurer = FakeMeasurer()
    visits = visits_of(search_grid, config(), measurer)
    assert len(visits) == GRID_TRIALS == len(set(measurer.measured))
    assert true_throughput(best_of(visits)) == 230


def test_greedy_finds_the_optimum_with_a_third_of_the_grid():
    measurer = FakeMeasurer()
    visits = visits_of(search_greedy, config(), measurer)
    assert true_throughput(best_of(visits)) == 230
    assert len(visits) == len(set(measurer.measured)), "nothing is measured twice"
    assert len(visits) <= GRID_TRIALS / 3
    rounds = {v.round for v in visits}
    assert max(rounds) <= MAX_GREEDY_ROUNDS and max(rounds) >= 2, "it stops after a round without gain"


def test_greedy_keeps_the_current_setting_when_the_gain_is_within_the_tolerance():
    def truth(kw: dict) -> float:  # workers pay; every other key moves throughput by 1% at most
        return 100 + 40 * min(kw["num_workers"], 3) + (1.0 if kw["persistent_workers"] else 0.0) \
            + (0.5 if kw["prefetch_factor"] == 8 else 0.0)

    measurer = FakeMeasurer(half_width=0.5, truth=truth)
    visits = visits_of(search_greedy, config(), measurer)
    assert {v.round for v in visits} == {1}, "nothing moved after the worker count: no second round"
    # in_order is swept last, on the current setting of every other key.
    last = [v.trial.loader_kwargs for v in visits if v.trial.loader_kwargs["in_order"] is False]
    assert last and all(kw["num_workers"] == 3 for kw in last), "it moved to 3 workers and kept them"
    assert all(kw["prefetch_factor"] == 2 and kw["persistent_workers"] is False for kw in last), \
        "gains within the tolerance never move the current setting"


def test_ofat_follows_up_on_the_winner_and_finds_what_one_change_misses():
    measurer = FakeMeasurer()
    visits = visits_of(search_ofat, config(), measurer)
    by_round: dict[int, list[str]] = {}
    for v in visits:
        by_round.setdefault(v.round, []).append(v.trial.name)
    assert by_round[1][0] == "baseline" and all("," not in n for n in by_round[1]), "round 1: one change each"
    # Round 2 sits on the round-1 winner (3 workers); round 3 on the round-2 winner (and prefetch 4).
    assert all(n.startswith("num_workers=3, ") for n in by_round[2])
    assert "num_workers=3, prefetch_factor=2" not in by_round[2], "prefetch 2 is the baseline's own value"
    round_3 = [v.trial.loader_kwargs for v in visits if v.round == 3]
    assert all(kw["prefetch_factor"] == 4 for kw in round_3)
    # The worker count is swept again now that prefetch moved, on prefetch 4 (1 is round 1's
    # prefetch_factor=4; 0 would drop the prefetch, which is round 1's num_workers=0; 6 ran at
    # 115 against 190 in round 1, far behind).
    assert {kw["num_workers"] for kw in round_3 if not kw["persistent_workers"] and kw["in_order"]} == {2, 4}
    assert true_throughput(best_of(visits)) == 230, "prefetch 4 only pays with 2+ workers: round 2 finds it"
    assert "combined" not in [v.trial.name for v in visits], "every key at its round-1 best was measured already"
    assert len(set(measurer.measured)) == len(measurer.measured), "nothing is measured twice"


def test_ofat_sweeps_again_the_values_behind_but_not_those_far_behind():
    def truth(kw: dict) -> float:  # six workers lose without persistent workers and win with them
        nw, pers = kw["num_workers"], kw["persistent_workers"]
        if nw == 6 and pers:
            return 260.0
        return {1: 100.0, 2: 180.0, 3: 200.0, 6: 165.0}[nw] + (10.0 if pers else 0.0)

    measurer = FakeMeasurer(truth=truth)
    sweep = {"num_workers": [1, 2, 3, 6], "persistent_workers": [False, True]}
    visits = visits_of(search_ofat, config({"batch_size": 8, "num_workers": 2}, sweep), measurer)
    rounds = {v.trial.name: v.round for v in visits}
    assert rounds["num_workers=3, persistent_workers=true"] == 2
    assert rounds["num_workers=6, persistent_workers=true"] == 3, "165 of 200 is behind, not far behind"
    assert "num_workers=1, persistent_workers=true" not in rounds, "100 of 200 is far behind: not again"
    assert max(truth(v.trial.loader_kwargs) for v in visits) == 260


def test_ofat_measures_worker_settings_on_the_best_worker_count_when_the_baseline_has_none():
    def truth(kw: dict) -> float:  # no workers is best; persistent workers still help those with workers
        return 300 - 50 * kw["num_workers"] + (20 if kw["persistent_workers"] else 0)

    measurer = FakeMeasurer(truth=truth)
    sweep = {"num_workers": [0, 1, 2], "prefetch_factor": [1, 4], "persistent_workers": [False, True]}
    visits = visits_of(search_ofat, config({"batch_size": 8}, sweep), measurer)
    assert not [v for v in visits if v.trial.skipped], "no key ends skipped: each is measured with workers"
    follow = [v.trial.name for v in visits if v.round == 2]
    assert set(follow) == {"num_workers=1, prefetch_factor=1", "num_workers=1, prefetch_factor=4",
                           "num_workers=1, persistent_workers=true"}, "on the best trial with workers"


def test_settings_that_need_workers_are_skipped_rows_only_when_no_trial_with_workers_ran():
    def truth(kw: dict) -> float:
        return 300.0

    sweep = {"prefetch_factor": [4], "persistent_workers": [True]}  # no worker count to sit on
    visits = visits_of(search_ofat, config({"batch_size": 8}, sweep), FakeMeasurer(truth=truth))
    skipped = {v.trial.name: v.trial.skip_reason for v in visits if v.trial.skipped}
    assert set(skipped) == {"prefetch_factor=4", "persistent_workers=true"}
    assert all("num_workers=0" in why for why in skipped.values())


def test_unknown_strategy():
    with pytest.raises(ValueError, match="'random' is not a valid Strategy"):
        run_strategy("random", Search(config(), False, FakeMeasurer()))


def test_the_picks_advice_is_measured_on_top_of_it_and_marked():
    def truth(kw: dict) -> float:  # more workers keep paying, beyond the swept values
        return 100.0 + 50 * kw["num_workers"]

    class Advising(FakeMeasurer):
        def __call__(self, trials, round_no):
            out = super().__call__(trials, round_no)
            for t in trials:  # the verdict of every trial: "try twice the workers"
                if out[t.name].ran:
                    more = (("num_workers", 2 * max(1, t.loader_kwargs["num_workers"])),)
                    out[t.name] = dataclasses.replace(out[t.name], suggests=(more,))
            return out

    measurer = Advising(truth=truth)
    visits = visits_of(search_ofat, config({"batch_size": 8}, {"num_workers": [0, 1, 2]}), measurer)
    asked = [v for v in visits if v.trial.asked_by]
    assert [v.trial.name for v in asked] == ["num_workers=4"]
    assert asked[0].trial.asked_by == "num_workers=2" and asked[0].round == max(v.round for v in visits)
    again = visits_of(search_grid, config({"batch_size": 8}, {"num_workers": [0, 1, 2]}), Advising(truth=truth))
    assert [v.trial.name for v in again if v.trial.asked_by] == ["num_workers=4"], "one mechanism for all"


def test_advice_that_changes_an_unswept_setting_is_never_measured():
    """The verdict asks for in_order=False and a deeper prefetch: only what the config sweeps is
    measured (in_order changes the batches' order; it is measured only where it is swept)."""
    class Starved(FakeMeasurer):
        def __call__(self, trials, round_no):
            out = super().__call__(trials, round_no)
            for t in trials:
                if out[t.name].ran:
                    asks = ((("prefetch_factor", 16),), (("in_order", False),))
                    out[t.name] = dataclasses.replace(out[t.name], suggests=asks)
            return out

    sweep = {"num_workers": [1, 2], "prefetch_factor": [2, 8]}
    loader = {"batch_size": 8, "num_workers": 1, "prefetch_factor": 2}
    visits = visits_of(search_ofat, config(loader, sweep), Starved())
    assert all(v.trial.loader_kwargs.get("in_order", True) for v in visits), "in_order is not swept"
    asked = {v.trial.name for v in visits if v.trial.asked_by}
    assert asked and all("in_order" not in name for name in asked)
    swept = visits_of(search_ofat, config(loader, {**sweep, "in_order": [True, False]}), Starved())
    assert any(v.trial.loader_kwargs.get("in_order") is False for v in swept), "swept: measured"


def test_ofat_sweeps_the_worker_count_again_once_another_key_moved():
    """Restarting workers every epoch costs more with more workers: without persistent workers 2
    beat 4, with them 4 is best. The worker count, swept in round 1, is swept again on top of
    persistent workers and finds 4."""
    def truth(kw: dict) -> float:
        nw, pers = kw["num_workers"], kw["persistent_workers"]
        return 100 + 50 * nw - (0 if pers else 10 * nw * nw)

    sweep = {"num_workers": [0, 2, 4], "persistent_workers": [False, True]}
    measurer = FakeMeasurer(truth=truth)
    visits = visits_of(search_ofat, config({"batch_size": 8, "num_workers": 1}, sweep), measurer)
    assert best_of(visits) == {**best_of(visits), "num_workers": 4, "persistent_workers": True}
    assert len(set(measurer.measured)) == len(measurer.measured), "nothing is measured twice"
