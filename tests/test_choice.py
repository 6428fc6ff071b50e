"""The one pick rule (choice.choose: the cheapest within the tolerance of the best, ties broken by
cost, then by the order given), the one contender rule and the one tolerance test, as every
caller uses them: racing's pick, the recommended row and the model strategy's targets."""

from __future__ import annotations

from loadtune.core.kinds import RankBy
from loadtune.decide.choice import beats, choose, contends, recommended, record_contends, within_tolerance
from loadtune.decide.selection import Scored, pick
from loadtune.record.interval import Interval
from loadtune.record.record import Record


def test_choose_takes_the_cheapest_within_then_the_first_of_equal_cost():
    items = [("best", 100.0, (4.0,)), ("close", 98.0, (2.0,)), ("also", 97.5, (2.0,)), ("far", 50.0, (0.0,))]
    within = lambda it: within_tolerance(it[1], 100.0, 0.03)  # noqa: E731
    assert choose(items, within, lambda it: it[2])[0] == "close", "cheapest within; of equal cost the first given"
    assert choose(reversed(items), within, lambda it: it[2])[0] == "also"
    assert choose(items, lambda it: False, lambda it: it[2]) is None


def test_within_tolerance_on_a_scale_where_higher_is_better():
    assert within_tolerance(97.0, 100.0, 0.03) and not within_tolerance(96.9, 100.0, 0.03)
    # The wait ratio negated: at most the tolerance above the best's.
    assert within_tolerance(-0.13, -0.10, 0.03, RankBy.WAIT_RATIO)
    assert not within_tolerance(-0.14, -0.10, 0.03, RankBy.WAIT_RATIO)


def test_beats_by_more_than_the_tolerance_on_either_scale():
    assert beats(106.0, 100.0, 0.05) and not beats(105.0, 100.0, 0.05)
    assert beats(0.10, 0.20, 0.05, RankBy.WAIT_RATIO) and not beats(0.16, 0.20, 0.05, RankBy.WAIT_RATIO)


def test_predict_and_travel_use_the_one_rule():
    """predict.choose: the cheapest within the tolerance, ties by fewest kept settings changed,
    then cost; the pick travels while it is within the tolerance of the recommendation."""
    from loadtune.model.predict import choose as predict_choose

    configs = [({"num_workers": 4}, 100.0), ({"num_workers": 2}, 96.0), ({"num_workers": 1}, 90.0)]
    assert predict_choose(configs, 0.05) == 1
    assert predict_choose(configs, 0.11) == 2
    assert predict_choose(configs, 0.05, keep={"num_workers": 4}) == 0
    assert predict_choose([({"num_workers": 1}, float("nan"))], 0.05) is None


def test_a_contender_ran_is_no_reference_and_is_not_flagged():
    assert contends("num_workers=2", ran=True, flagged=False)
    assert not contends("ideal", ran=True, flagged=False)
    assert not contends("num_workers=2", ran=False, flagged=False)
    assert not contends("num_workers=2", ran=True, flagged=True)
    row = Record(trial="num_workers=2", status="ok", throughput=100.0, wait_ratio=0.1)
    assert record_contends(row) and not record_contends(Record(trial="num_workers=2", status="failed"))


def test_the_pick_and_the_recommendation_follow_the_one_rule():
    def scored(name: str, throughput: float, cost: tuple[float, ...]) -> Scored:
        return Scored(name, Interval(throughput, throughput - 0.1, throughput + 0.1), Interval(0.1, 0.1, 0.1),
                      repeats=3, cost=cost)

    chosen = pick([scored("fast", 100.0, (4.0,)), scored("cheap", 99.5, (1.0,)), scored("slow", 60.0, (0.0,))], 0.03)
    assert chosen is not None and chosen.name == "cheap"
    rows = [Record.of(trial="a", status="ok", throughput=100.0, tied_with_best=True, num_workers=4),
            Record.of(trial="b", status="ok", throughput=99.0, tied_with_best=True, num_workers=2),
            Record.of(trial="c", status="ok", throughput=98.0, tied_with_best=True, num_workers=2),
            Record.of(trial="d", status="ok", throughput=50.0, tied_with_best=False, num_workers=0)]
    best = recommended(rows)
    assert best is not None and best.trial == "b", "the cheapest tied with the best; of equal cost the faster"


def test_a_files_recommendation_is_its_first_row_tied_with_the_best_and_in_older_files_the_cheapest():
    # Since format 6 a decided sweep marks every config within its zone =1 and writes its pick first of
    # them: the pick may be dearer than another =1 row (that one expected to cost more than half the zone).
    def rows(version: int) -> list[Record]:
        return [Record.of(trial="pick", status="ok", throughput=100.0, tied_with_best=True, num_workers=3,
                          format_version=version),
                Record.of(trial="cheap", status="ok", throughput=93.0, tied_with_best=True, num_workers=2,
                          format_version=version)]

    now, older = recommended(rows(6)), recommended(rows(5))
    assert now is not None and now.trial == "pick"
    assert older is not None and older.trial == "cheap", "as the sweep picked then: the cheapest tied"


def test_the_pick_is_written_first_of_the_rows_tied_with_the_best():
    from loadtune.decide.ranking import Placing, apply_ranking

    rows = [Record.of(trial="fast", status="ok", throughput=100.0),
            Record.of(trial="pick", status="ok", throughput=95.0),
            Record.of(trial="slow", status="ok", throughput=50.0)]
    placings = {"fast": Placing(1, True), "pick": Placing(1, True), "slow": Placing(3, False)}
    assert [r.trial for r in apply_ranking(rows, placings, 50.0, pick="pick")] == ["pick", "fast", "slow"]
    assert [r.trial for r in apply_ranking(rows, placings, 50.0)] == ["fast", "pick", "slow"]
