"""Practical ties and racing: on made-up scores, and through the sweep's runner with a fake
trial process whose throughputs are known, so the repeats each trial gets are exact."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from loadtune.asked.config import load_config
from loadtune.asked.plan import trial_for
from loadtune.asked.trials import cost_of
from loadtune.core.kinds import RankBy
from loadtune.decide.selection import (
    MIN_REPEATS_TO_DECIDE,
    RERUN_AGREEMENT,
    Scored,
    as_good,
    clearly_behind,
    expected_shortfall,
    pick,
    race_step,
    rerun_picks,
    rerun_ties,
    throughput_ratio_lower,
)
from loadtune.record.interval import Interval
from loadtune.record.measurement import Measurement, TrialStart, Window
from loadtune.record.record import read_records
from loadtune.sweep_process.conclude import decision as decision_of
from loadtune.sweep_process.launch import Outcome
from loadtune.sweep_process.racer import Racer
from tests.conftest import fake_runner, tiny_config


def scored(name: str, mean: float, half: float, repeats: int = 2, workers: int = 1, draws=None) -> Scored:
    return Scored(name, Interval(mean, mean - half, mean + half), Interval(0.5, 0.49, 0.51), draws, None, repeats,
                  cost_of({"num_workers": workers}))


def test_ratio_bound_from_draws_is_the_5th_percentile_of_the_ratio():
    rng = np.random.default_rng(1)
    a_draws, b_draws = rng.normal(100, 1, 4000), rng.normal(100, 1, 4000)
    a, b = scored("a", 100, 2, draws=a_draws), scored("b", 100, 2, draws=b_draws)
    bound = throughput_ratio_lower(a, b)
    # The ratio of two independent N(100, 1) is about N(1, 0.0141): its 5th percentile is 1 - 1.645 * 0.0141.
    assert bound == pytest.approx(1 - 1.645 * 0.01414, abs=0.003)
    assert throughput_ratio_lower(a, a) == 1.0
    # Without draws (a trial kept from an earlier run), the cautious bound: a's low over b's high.
    assert throughput_ratio_lower(scored("a", 100, 2), scored("b", 100, 2)) == pytest.approx(98 / 102)


def test_as_good_clearly_behind_and_undecided_are_three_states():
    leader = scored("lead", 100, 1)
    assert as_good(scored("tied", 99, 0.5), leader, 0.03)  # 98.5 / 101 = 0.975
    behind = scored("behind", 90, 1)  # 91 < 0.97 * 99 = 96.03
    assert clearly_behind(behind, leader, 0.03) and not as_good(behind, leader, 0.03)
    unsure = scored("unsure", 97, 3)  # 94 / 101 = 0.93: not shown as good; 100 > 96.03: not behind
    assert not as_good(unsure, leader, 0.03) and not clearly_behind(unsure, leader, 0.03)


def test_clearly_behind_is_the_ratio_shown_below_one_minus_the_tolerance():
    rng = np.random.default_rng(2)
    # Each trial's mean known to about 10% (sd); 70 against 100: the ratio is about 0.70 +- 0.099,
    # so its 95% upper bound, about 0.86, is below 0.97, while the two 95% intervals overlap.
    lead = scored("lead", 100, 19.6, draws=rng.normal(100, 10, 4000))
    slow = scored("slow", 70, 13.7, draws=rng.normal(70, 7, 4000))
    assert slow.throughput.hi > 0.97 * lead.throughput.lo, "the intervals overlap"
    assert clearly_behind(slow, lead, 0.03)
    near = scored("near", 90, 17.6, draws=rng.normal(90, 9, 4000))  # ratio 0.9 +- 0.127: up to about 1.11
    assert not clearly_behind(near, lead, 0.03) and not as_good(near, lead, 0.03)


def test_the_pick_is_the_cheapest_shown_as_good_as_the_best():
    items = [scored("w4", 100, 0.5, workers=4), scored("w2", 99, 0.5, workers=2), scored("w1", 90, 0.5, workers=1)]
    assert pick(items, 0.03).name == "w2"
    assert pick(items, 0.0001).name == "w4"
    assert pick([Scored("x", None, None)], 0.03) is None


def test_race_stops_the_clearly_behind_and_measures_the_undecided_again():
    items = [scored("w4", 100, 3, repeats=1, workers=4), scored("w2", 98, 3, repeats=1, workers=2),
             scored("w0", 60, 2, repeats=1, workers=0)]
    step = race_step(items, 0.03, max_repeats=3)
    assert step.stop == ("w0",)
    assert step.pick == "w4" and not step.decided
    assert set(step.again) == {"w4", "w2"} and step.undecided == ("w2",)
    # w2 may be up to 101 / 97 of the pick: the pick may leave 1 - 97 / 101 on the table.
    assert step.gap == pytest.approx(1 - 97 / 101, abs=1e-9)


def test_race_measures_the_pick_against_its_strongest_rival_only():
    items = [scored("w4", 100, 3, repeats=1, workers=4), scored("w3", 99, 3, repeats=1, workers=3),
             scored("w2", 98, 3, repeats=1, workers=2)]
    step = race_step(items, 0.03, max_repeats=3)
    assert step.pick == "w4" and set(step.undecided) == {"w3", "w2"}
    assert step.again == ("w4", "w3"), "the weaker rival waits: the stronger one decides the pick first"
    # The strongest rival and the pick at their limit: racing ends, w2 still named undecided.
    spent = [scored("w4", 100, 3, repeats=3, workers=4), scored("w3", 99, 3, repeats=3, workers=3),
             scored("w2", 98, 3, repeats=1, workers=2)]
    step = race_step(spent, 0.03, max_repeats=3)
    assert step.again == () and not step.decided and "w2" in step.undecided


def test_race_is_decided_once_the_pick_is_shown_as_good_as_each_contender():
    items = [scored("w4", 100, 0.5, workers=4), scored("w2", 99.5, 0.5, workers=2)]
    step = race_step(items, 0.03, max_repeats=3)
    assert step.decided and step.pick == "w2" and step.again == () and step.gap == 0.03
    one_each = [scored("w4", 100, 0.5, repeats=1, workers=4), scored("w2", 99.5, 0.5, repeats=1, workers=2)]
    assert not race_step(one_each, 0.03, max_repeats=3).decided, \
        f"{MIN_REPEATS_TO_DECIDE} processes each before a tie is believed"
    at_most = race_step(one_each, 0.03, max_repeats=1)
    assert at_most.decided, "with one repeat allowed, one is enough"


def test_race_never_asks_more_of_a_trial_at_its_limit_or_kept_from_an_earlier_run():
    items = [scored("w4", 100, 5, repeats=3, workers=4), scored("kept", 99, 5, repeats=0, workers=2)]
    step = race_step(items, 0.03, max_repeats=3)
    assert step.again == () and not step.decided


def test_expected_shortfall_is_the_mean_loss_over_the_draws():
    a = scored("a", 100, 10, draws=np.array([100.0, 100.0, 100.0, 100.0]))
    b = scored("b", 100, 10, draws=np.array([125.0, 80.0, 100.0, 50.0]))
    # a / b per draw: 0.8, 1.25, 1, 2: a loses 20% in one draw of four.
    assert expected_shortfall(a, b) == pytest.approx(0.05)
    assert expected_shortfall(b, a) == pytest.approx((0.2 + 0.5) / 4)
    assert expected_shortfall(a, a) == 0.0
    assert expected_shortfall(scored("x", 100, 2), b) is None, "a trial kept from an earlier run has no draws"


def test_configs_equal_within_the_noise_are_a_called_tie_and_the_cheaper_is_picked():
    rng = np.random.default_rng(3)
    # 100 against 99.5, each known to 1.5%: the ratio, about 1.005 +- 0.021, is not shown above
    # 0.97, but taking the cheaper w2 loses little, on average, over the draws: either will do.
    lead = scored("w4", 100, 3, workers=4, draws=rng.normal(100, 1.5, 4000))
    rival = scored("w2", 99.5, 3, workers=2, draws=rng.normal(99.5, 1.5, 4000))
    assert not as_good(rival, lead, 0.03) and 0.005 < expected_shortfall(rival, lead) < 0.015
    step = race_step([lead, rival], 0.03, max_repeats=5)
    assert step.pick == "w2" and step.equal == ("w4",) and step.decided and step.undecided == ()
    assert step.again == (), "more repeats would buy less than the tolerance on average"
    early = race_step([lead, rival], 0.03, max_repeats=5, may_stop=False)
    assert early.pick == "w4" and early.equal == () and not early.decided and early.again == ("w4", "w2"), \
        "before the noise between processes is known, nothing is called equal"
    # The same two known to 10% each: taking w2 may well lose more than 3%: race on.
    wide = [scored("w4", 100, 20, workers=4, draws=rng.normal(100, 10, 4000)),
            scored("w2", 99, 20, workers=2, draws=rng.normal(99, 10, 4000))]
    step = race_step(wide, 0.03, max_repeats=5)
    assert step.pick == "w4" and step.expected > 0.03 and not step.decided and step.again == ("w4", "w2")


def test_a_contender_the_model_predicts_ahead_is_raced_first_whatever_one_process_read():
    rng = np.random.default_rng(4)
    pick_ = scored("w2", 100, 6, repeats=2, workers=2, draws=rng.normal(100, 2.5, 4000))
    near = scored("w3", 97, 8, repeats=1, workers=3, draws=rng.normal(97, 4, 4000))
    slow = scored("w2p", 94, 8, repeats=1, workers=3, draws=rng.normal(94, 4, 4000))
    plain = race_step([pick_, near, slow], 0.03, max_repeats=3)
    assert plain.decided and plain.equal == ("w3", "w2p") and plain.again == (), \
        "a rerun might pick either, and the pick is expected to lose little to them"
    disputed = race_step([pick_, near, slow], 0.03, max_repeats=3, disputes=lambda a, b: (a, b) == ("w2p", "w2"))
    assert not disputed.decided and disputed.undecided == ("w2p",) and disputed.equal == ("w3",)
    assert disputed.again == ("w2", "w2p"), "the model predicts w2p ahead of the pick: it is measured again"


def test_a_rerun_picks_what_its_own_draws_make_the_cheapest_acceptable():
    rng = np.random.default_rng(5)
    # Two configs equal at 100 samples/s, known to 4%: a rerun's estimates (twice the variance)
    # put either ahead about half the time; the cheaper is picked unless it falls behind by more
    # than the tolerance allows at that spread. A config at 70 is never picked.
    cheap = scored("w2", 100, 8, workers=2, draws=rng.normal(100, 4, 4000))
    dear = scored("w4", 100, 8, workers=4, draws=rng.normal(100, 4, 4000))
    slow = scored("w1", 70, 6, workers=1, draws=rng.normal(70, 3, 4000))
    shares = rerun_picks([cheap, dear, slow], 0.03)
    assert shares["w1"] == 0.0 and sum(shares.values()) == pytest.approx(1.0)
    assert 0.3 < shares["w4"] < 0.7 and 0.3 < shares["w2"] < 0.7
    assert rerun_ties("w2", shares) == ["w4"], "with the pick, they hold every rerun's pick"
    # Known to 0.2%: taking the cheaper costs little whichever leads: a rerun picks it.
    sure = [scored("w2", 100, 1, workers=2, draws=rng.normal(100, 0.2, 4000)),
            scored("w4", 100.2, 1, workers=4, draws=rng.normal(100.2, 0.2, 4000))]
    assert rerun_picks(sure, 0.03)["w2"] > RERUN_AGREEMENT
    assert rerun_ties("w2", rerun_picks(sure, 0.03)) == []


# --- through the runner, with a fake trial process ----------------------------------------------

TRUE = {"baseline": 200.0, "no workers": 100.0, "num_workers=2": 400.0, "num_workers=3": 398.0}


def fake_measurement(throughput: float, repeat: int, batches: int = 20) -> Measurement:
    """`batches` batches of 8 samples whose times give `throughput`, with a small alternating wobble."""
    per_batch = 8 / throughput
    wobble = [per_batch * (1 + 0.01 * ((i + repeat) % 3 - 1)) for i in range(batches)]
    window = Window(tuple(0.2 * t for t in wobble), (0.0,) * batches, tuple(0.8 * t for t in wobble),
                    (8,) * batches, (False,) * batches)
    return Measurement(TrialStart(0.1), (window,))


class FakeTrials:
    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def __call__(self, job, timeout_s):
        name = job.trial.name
        self.runs[name] = self.runs.get(name, 0) + 1
        truth = TRUE["no workers" if job.trial.loader_kwargs["num_workers"] == 0 else name]
        return Outcome("ok", "", fake_measurement(truth, self.runs[name]), 0.5)


def runner_for(tmp_path: Path, write_config, **measure) -> tuple[Racer, FakeTrials]:
    config = tiny_config(measure={"warmup_batches": 1, "batches": 20, "timeout_s": 10, **measure})
    spec = load_config(write_config(config))
    fake = FakeTrials()
    runner = fake_runner(spec, tmp_path / "out.csv", fake)
    return runner, fake


def test_racing_gives_repeats_only_where_the_decision_is(tmp_path, write_config):
    runner, fake = runner_for(tmp_path, write_config, min_repeats=1, repeats=4, tolerance=0.03)
    spec = runner.setup.spec.config
    trials = [trial_for(spec, {}, False), trial_for(spec, {"num_workers": 0}, False),
              trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)]
    runner.measure(trials, 1)
    assert set(fake.runs.values()) == {1}, "a round only measures: the repeats come once the rounds are done"
    none = trials[1].name
    assert not any(run.stopped_early for run in runner.runs.values()), \
        "no trial has two repeats yet: nothing shows how much processes differ, so none is stopped"
    runner.race()
    assert runner.runs[none].stopped_early and runner.runs["baseline"].stopped_early, "clearly behind"
    assert fake.runs[none] == 1 and fake.runs["baseline"] == 1, "stopped after one repeat"
    assert fake.runs["num_workers=2"] >= MIN_REPEATS_TO_DECIDE and fake.runs["num_workers=3"] >= 2
    decision = decision_of(runner)
    assert decision.decided, "398 and 400 are within 3% once each has two repeats"
    records = {r.trial: r for r in read_records(tmp_path / "out.csv", required=())}
    assert records[none].measuring.stopped_early is True and records[none].measuring.repeats == 1
    assert records["num_workers=2"].measuring.repeats == fake.runs["num_workers=2"], "the file holds the latest figures"
    assert len(records) == 4, "a trial measured again is one row, rewritten"


class ProcessNoisy(FakeTrials):
    """Each trial's processes run `swing` fast, then `swing` slow, in turn, while their own
    batches are steady: only the repeats show the noise."""

    def __init__(self, swing: float, truths: dict[str, float] | None = None) -> None:
        super().__init__()
        self.swing, self.truths = swing, truths or {}

    def __call__(self, job, timeout_s):
        name = job.trial.name
        self.runs[name] = self.runs.get(name, 0) + 1
        truth = self.truths.get(name) or TRUE["no workers" if job.trial.loader_kwargs["num_workers"] == 0 else name]
        swung = truth * (1 + self.swing if self.runs[name] % 2 else 1 - self.swing)
        return Outcome("ok", "", fake_measurement(swung, 0), 0.5)


def test_a_difference_inside_the_machines_resolution_is_a_tie_and_the_cheaper_is_picked(tmp_path, write_config):
    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=3, tolerance=0.03)
    runner.execute = noisy = ProcessNoisy(0.08)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    runner.race()
    assert runner.noise is not None and runner.noise.throughput_log_sd > 0.05
    decision = decision_of(runner)
    # Processes 16% apart: three repeats resolve no less than about 10%, so 398 and 400 are equal
    # at this machine's resolution, and racing them to their limit would settle nothing.
    assert decision.zone > 0.03 and decision.decided
    assert decision.pick == "num_workers=2" and decision.equal == ("num_workers=3",)
    assert noisy.runs == {"num_workers=2": 2, "num_workers=3": 2}, "two processes each show the spread"
    records = {r.trial: r for r in read_records(tmp_path / "out.csv", required=())}
    row = records["num_workers=2"]
    spread = row.figures.throughput_hi - row.figures.throughput_lo
    assert spread / row.throughput > 0.05, "the file's interval shows that noise"


def test_the_budget_ends_racing_and_the_decision_says_so(tmp_path, write_config):
    runner, fake = runner_for(tmp_path, write_config, min_repeats=1, repeats=5, budget_s=0.001)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    runner.race()
    assert fake.runs == {"num_workers=2": 1, "num_workers=3": 1}
    decision = decision_of(runner)
    assert not decision.decided and "budget" in decision.why and decision.undecided


def test_racing_names_two_configs_a_percent_apart_equal_within_the_noise(tmp_path, write_config):
    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=5, tolerance=0.03)
    # num_workers=2 runs 1% behind num_workers=3; each trial's processes 2% fast, then 2% slow.
    runner.execute = close = ProcessNoisy(0.02, {"num_workers=2": 396.0, "num_workers=3": 400.0})
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {"num_workers": 2}, False), trial_for(spec, {"num_workers": 3}, False)], 1)
    runner.race()
    assert close.runs == {"num_workers=2": 2, "num_workers=3": 2}, "settled once the spread was seen"
    decision = decision_of(runner)
    # Taking the cheaper would cost more than half the zone on average at this spread: the pick
    # is the faster; a rerun may pick the cheaper, which the pick costs little against.
    assert decision.decided and decision.pick == "num_workers=3" and decision.equal == ("num_workers=2",)
    assert decision.undecided == ()


def test_advice_is_checked_against_the_trials_the_runner_measured(tmp_path, write_config, monkeypatch):
    """The trials the advice names are found by the names the runner gave the trials it ran."""
    import dataclasses

    from loadtune.decide.advice import with_checked_advice
    from loadtune.sweep_process.conclude import advised as advised_by, ranked

    monkeypatch.setitem(TRUE, "num_workers=2, persistent_workers=true", 300.0)
    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=1)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {}, False), trial_for(spec, {"num_workers": 2}, False),
                    trial_for(spec, {"num_workers": 2, "persistent_workers": True}, False)], 1)
    run = runner.runs["num_workers=2"]
    run.score = dataclasses.replace(run.score, suggests=((("persistent_workers", True),),))
    run.record = run.record.with_columns(advice="62% of the wait is at epoch starts: set "
                                                 "persistent_workers=True.")
    advised = advised_by(runner.runs, runner.setup.spec.config, False)
    assert [(a.setting, a.exact, a.alone) for a in advised["num_workers=2"]] == \
        [("persistent_workers=True", "num_workers=2, persistent_workers=true", "persistent_workers=true")]
    placed = ranked(runner.runs, RankBy.THROUGHPUT, 0.03, runner.model.ties)
    records = {r.trial: r for r in with_checked_advice(placed, advised, 0.03)}
    assert re.fullmatch(r"62% of the wait is at epoch starts: persistent_workers=True measured 29\d\.\d "
                        r"\[\d+\.\d, \d+\.\d\] samples/s against 39\d\.\d \(num_workers=2\): not shown to help here\.",
                        records["num_workers=2"].assessment.advice), records["num_workers=2"].assessment.advice


# --- what a config's workers can deliver bounds it before it runs --------------------------------


def test_workers_bound_is_their_batches_at_the_measured_fetch_time_less_its_margin():
    from loadtune.decide.choice import FETCH_BOUND_MARGIN, fetches_alike, workers_bound

    assert FETCH_BOUND_MARGIN == 0.10
    assert workers_bound(1, 8, 36.0) == pytest.approx(8 / 0.0324)  # 36 ms less 10%: 32.4 ms a batch
    assert workers_bound(3, 8, 36.0) == pytest.approx(3 * 8 / 0.0324)
    base = {"num_workers": 1, "batch_size": 8, "prefetch_factor": 2}
    assert fetches_alike({**base, "prefetch_factor": 4}, base) and fetches_alike(base, {**base, "prefetch_factor": 1})
    kept = {**base, "persistent_workers": True}
    assert fetches_alike(base, kept), "fetches of persistent workers are never the colder"
    assert not fetches_alike(kept, base), "workers started every epoch fetch their first batches cold"
    assert not fetches_alike({**base, "pin_memory": True}, base), "a pinned copy is the model's to learn"
    assert not fetches_alike({**base, "num_workers": 2}, base), "more workers make more"
    assert not fetches_alike({**base, "worker_threads": 2}, base), "threads change a fetch"
    assert not fetches_alike({**base, "num_workers": 0}, {**base, "num_workers": 0}), "no workers: the loop fetches"
    assert not fetches_alike({**base, "batch_size": None}, {**base, "batch_size": None}), \
        "a batch sampler's batches: no batch size to count by"


class Fetching(FakeTrials):
    """FakeTrials whose loading processes report `fetch_s` a batch (8 samples) each."""

    def __init__(self, fetch_s: float) -> None:
        super().__init__()
        self.fetch_s = fetch_s

    def __call__(self, job, timeout_s):
        import dataclasses

        from loadtune.record.measurement import LoaderUse

        outcome = super().__call__(job, timeout_s)
        m = outcome.result
        workers = job.trial.loader_kwargs["num_workers"] or 0
        uses = tuple(LoaderUse(w, 20, 20 * self.fetch_s, 20 * self.fetch_s) for w in range(workers))
        windows = tuple(dataclasses.replace(w, loaders=uses) for w in m.windows)
        return dataclasses.replace(outcome, result=dataclasses.replace(m, windows=windows))


@pytest.mark.parametrize("fetch_s, skipped", [(0.036, True), (0.012, False)])
def test_a_config_its_workers_cannot_carry_past_the_leader_is_not_measured(tmp_path, write_config, monkeypatch,
                                                                          fetch_s, skipped):
    """The baseline's one worker fetches 8 samples in 36 ms: at most 247 samples/s, whatever its
    prefetch, below what a config must reach beside num_workers=2's 400; at 12 ms (741) it runs."""
    import dataclasses

    from loadtune.sweep_process.racer import RaceSettings

    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=1)
    runner.execute = fake = Fetching(fetch_s)
    runner.settings = dataclasses.replace(runner.settings, bounds=True)
    spec = runner.setup.spec.config
    deeper = trial_for(spec, {"prefetch_factor": 4}, False)
    monkeypatch.setitem(TRUE, deeper.name, 200.0)
    runner.measure([trial_for(spec, {}, False), trial_for(spec, {"num_workers": 2}, False), deeper], 1)
    records = {r.trial: r for r in read_records(tmp_path / "out.csv", required=())}
    row = records[deeper.name]
    if skipped:
        assert deeper.name not in fake.runs and row.status == "skipped"
        assert re.fullmatch(r"its 1 worker makes at most 247 samples/s \(baseline fetched a batch in 36\.0 ms, taken "
                            r"as 32\.4\), below the 3\d\d it would need to contend", row.reason or ""), row.reason
    else:
        assert fake.runs[deeper.name] == 1 and row.status == "ok"
    assert fake.runs["num_workers=2"] == 1 and records["num_workers=2"].status == "ok"
    assert RaceSettings().bounds is False, "other strategies measure every trial they ask for"


def test_a_config_racing_stopped_after_a_whole_window_still_bounds_what_its_workers_make(tmp_path, write_config,
                                                                                      monkeypatch):
    """Racing stops the baseline (clearly behind), its window whole: its fetch time still bounds a
    config with its one worker and more prefetch, as before it was stopped (a resumed sweep meets
    the baseline stopped; it measured such configs again)."""
    import dataclasses

    runner, _ = runner_for(tmp_path, write_config, min_repeats=1, repeats=1)
    runner.execute = fake = Fetching(0.036)
    runner.settings = dataclasses.replace(runner.settings, bounds=True)
    spec = runner.setup.spec.config
    runner.measure([trial_for(spec, {}, False), trial_for(spec, {"num_workers": 2}, False)], 1)
    runner._stop(["baseline"])
    assert runner.runs["baseline"].stopped_early and not runner.runs["baseline"].cut_short
    deeper = trial_for(spec, {"prefetch_factor": 4}, False)
    monkeypatch.setitem(TRUE, deeper.name, 200.0)
    runner.measure([deeper], 2)
    assert deeper.name not in fake.runs and runner.runs[deeper.name].trial.skipped
