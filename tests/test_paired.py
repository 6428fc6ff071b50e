"""Close calls in pairs (decide.paired): the paired t interval on made-up pairs, its rates over
simulated machines whose drift moves adjacent processes together, and the racer's duel run as
pairs of adjacent processes in alternating order."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from loadtune.asked.plan import trial_for
from loadtune.decide.decision import Decision
from loadtune.decide.paired import (
    Judged,
    PairedCall,
    PairedOutcome,
    judge,
    paired_spread,
    t_one_sided_95,
)
from loadtune.record.record import read_records
from loadtune.record.samples import read_samples, samples_file
from loadtune.sweep_process.conclude import decision as decision_of
from loadtune.sweep_process.launch import Outcome
from tests.test_decide import fake_measurement, runner_for


def call(*ratios: float) -> PairedCall:
    return PairedCall("a", "b", tuple(math.log(r) for r in ratios))


def judged(c: PairedCall, zone: float = 0.03) -> Judged:
    spread = paired_spread([c])
    assert spread is not None
    result = judge(c, zone, *spread)
    assert result is not None
    return result


def test_t_quantiles_are_students_and_fall_to_the_normals():
    assert t_one_sided_95(1) == 6.314 and t_one_sided_95(4) == 2.132
    values = [t_one_sided_95(d) for d in range(1, 60)]
    assert values == sorted(values, reverse=True) and abs(values[-1] - 1.671) < 0.002
    assert abs(t_one_sided_95(11) - 1.796) < 0.002 and abs(t_one_sided_95(30) - 1.697) < 0.002
    with pytest.raises(ValueError):
        t_one_sided_95(0)


def test_the_spread_is_each_calls_pairs_about_their_own_mean_pooled():
    a, b = PairedCall("a", "b", (0.0, 0.2)), PairedCall("c", "d", (1.0, 1.0, 1.3))
    spread = paired_spread([a, b, PairedCall("e", "f", (5.0,))])
    assert spread is not None
    sd, dof = spread
    assert dof == 1 + 2
    assert sd == pytest.approx(math.sqrt((0.02 + (0.01 + 0.01 + 0.04)) / 3))
    assert paired_spread([PairedCall("a", "b", (0.1,))]) is None, "one pair shows no spread"


def test_three_outcomes_at_the_zone():
    assert judged(call(1.002, 0.998, 1.001, 0.999)).outcome == PairedOutcome.EQUAL
    behind = judged(call(0.90, 0.91, 0.89, 0.90))
    assert behind.outcome == PairedOutcome.FIRST_AHEAD and behind.high < 0.97
    assert judged(call(1.11, 1.10, 1.12)).outcome == PairedOutcome.SECOND_AHEAD
    unsure = judged(call(0.95, 1.05))
    assert unsure.outcome == PairedOutcome.UNDECIDED and unsure.low < 0.97 < 1.03 < unsure.high
    assert judge(PairedCall("a", "b"), 0.03, 0.01, 3) is None, "nothing to judge before a pair"


def test_the_interval_is_the_paired_t_interval_of_the_log_ratios():
    c = call(0.95, 0.97, 1.00)
    logs = np.log([0.95, 0.97, 1.00])
    half = 2.920 * logs.std(ddof=1) / math.sqrt(3)
    got = judged(c, 0.05)
    assert got.ratio == pytest.approx(math.exp(logs.mean()))
    assert (got.low, got.high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert got.outcome == PairedOutcome.UNDECIDED, "0.93-1.02 is not inside 0.95-1.05"
    assert judged(c, 0.10).outcome == PairedOutcome.EQUAL, "but inside 0.90-1.11"


def test_a_call_turned_round_and_written_reads_back():
    got = judged(call(0.90, 0.91, 0.89, 0.90))
    turned = got.facing("b")
    assert turned.call.first == "b" and turned.outcome == PairedOutcome.SECOND_AHEAD
    assert turned.ratio == pytest.approx(1 / got.ratio) and turned.low == pytest.approx(1 / got.high)
    assert turned.facing("b") is turned and turned.facing("a").ratio == pytest.approx(got.ratio)
    back = Judged.from_json(json.loads(json.dumps(got.to_json())))
    assert back == got
    decision = Decision(True, 0.03, "a", paired=(got,))
    assert Decision.from_json(json.loads(json.dumps(decision.to_json()))) == decision
    old = decision.to_json()
    del old["paired"]
    assert Decision.from_json(old).paired == (), "a decision written before pairs reads as none"


def simulate(true_ratio: float, pairs: int, zone: float, seed: int) -> PairedOutcome:
    """A machine drifting by 10% (shared by a pair's two processes) and each process 2% on its own."""
    rng = np.random.default_rng(seed)
    drift = rng.normal(0.0, 0.10, size=pairs)
    a = drift + rng.normal(0.0, 0.02, size=pairs)
    b = drift + math.log(true_ratio) + rng.normal(0.0, 0.02, size=pairs)
    c = PairedCall("a", "b", tuple(b - a))
    return judged(c, zone).outcome


def test_a_config_behind_by_more_than_the_zone_is_found_at_the_stated_rate():
    outcomes = [simulate(0.92, 6, 0.03, seed) for seed in range(400)]
    found = outcomes.count(PairedOutcome.FIRST_AHEAD) / len(outcomes)
    assert found >= 0.90, f"8% behind, 3% zone, 6 pairs: found {found:.0%}"
    assert outcomes.count(PairedOutcome.SECOND_AHEAD) == 0


def test_equal_configs_are_called_equal_and_seldom_apart():
    outcomes = [simulate(1.0, 8, 0.05, seed) for seed in range(400)]
    apart = (outcomes.count(PairedOutcome.FIRST_AHEAD) + outcomes.count(PairedOutcome.SECOND_AHEAD)) / len(outcomes)
    assert apart <= 0.05, f"equal configs called apart {apart:.1%} of the time"
    assert outcomes.count(PairedOutcome.EQUAL) / len(outcomes) >= 0.90


class Drifting:
    """A machine whose speed moves every two processes (by `swing` up, then down, ...), trials' own
    batches steady: adjacent processes share the drift."""

    def __init__(self, truths: dict[str, float], swing: float) -> None:
        self.truths, self.swing, self.order = truths, swing, []  # type: ignore[var-annotated]

    def __call__(self, job, timeout_s):  # type: ignore[no-untyped-def]
        name = job.trial.name
        drift = 1 + self.swing if (len(self.order) // 2) % 2 == 0 else 1 - self.swing
        self.order.append(name)
        return Outcome("ok", "", fake_measurement(self.truths[name] * drift, 0), 0.5)


A, B = "num_workers=2", "num_workers=3"


def duel(tmp_path, write_config, truths: dict[str, float], swing: float):  # type: ignore[no-untyped-def]
    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=8, tolerance=0.03)
    runner.execute = machine = Drifting(truths, swing)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    runner.race()
    return runner, machine.order


def test_the_duel_runs_in_adjacent_pairs_in_alternating_order_and_settles_by_them(tmp_path, write_config):
    runner, order = duel(tmp_path, write_config, {A: 400.0, B: 404.0}, 0.05)
    pairs = [order[i:i + 2] for i in range(2, len(order), 2)]
    assert len(pairs) >= 2 and all(sorted(p) == [A, B] for p in pairs), f"each pair holds both, adjacent: {order}"
    assert all(p[0] != q[0] for p, q in zip(pairs, pairs[1:])), f"the first alternates: {order}"
    decision = decision_of(runner)
    (paired,) = decision.paired
    assert paired.call.first == decision.pick == A and paired.outcome == PairedOutcome.EQUAL
    assert paired.ratio == pytest.approx(404 / 400), "the drift cancels in each pair"
    assert decision.decided and decision.equal == (B,), "equal in pairs: the cheaper is the pick"


def test_a_config_shown_behind_in_pairs_stops(tmp_path, write_config):
    runner, _ = runner_for(tmp_path, write_config, min_repeats=2, repeats=3, tolerance=0.03)
    runner.execute = Drifting({A: 400.0, B: 404.0}, 0.05)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    ahead = (math.log(1.15), math.log(1.16), math.log(1.14))
    runner.progress.paired[frozenset((A, B))] = PairedCall(A, B, ahead)
    runner.race(more=False)
    assert runner.runs[A].stopped_early and not runner.runs[B].stopped_early, (runner.judged_pairs(), runner.spread)
    decision = decision_of(runner)
    assert decision.pick == B and decision.paired[0].call.first == B
    assert decision.paired[0].outcome == PairedOutcome.FIRST_AHEAD
    rows = {r.trial: r for r in read_records(tmp_path / "out.csv", required=())}
    assert rows[A].measuring.stopped_early is True, "the file says so"
    kept = read_samples(samples_file(tmp_path / "out.csv"))
    assert kept is not None and kept.trials[A].stopped_early, "and so do the raw samples a --resume reads"


def test_verbose_names_each_call_with_its_interval_and_outcome():
    from loadtune.present.answer import paired_lines

    (line,) = paired_lines([judged(call(1.002, 0.998, 1.001, 0.999))], 0.03)
    assert line.startswith("Head to head: b ran 1.00x a (90% interval 1.00-1.00) over 4 pairs of adjacent processes")
    assert line.endswith("equal within the 3% zone.")
    (behind,) = paired_lines([judged(call(0.90, 0.91, 0.89, 0.90))], 0.03)
    assert behind.endswith("a ahead by more than the 3% zone.")
