"""Deciding between noisy configs: practical equivalence within a tolerance, and which trials
to stop or to measure again (racing).

"Not shown to differ" is not "shown to be as good". A trial is as good as the best when the data
show it within `tolerance` of it (the lower bound of the ratio of their throughputs, one-sided
at 95%, at least 1 - tolerance, as in the two one-sided tests), or when the pick is expected to
lose at most the tolerance by taking it (the mean, over the two trials' draws, of what it would
lose): at several percent of noise between processes, showing a tie within 3% takes dozens of
processes, and configs that close are equal within this machine's noise: either will do. The
pick is the cheapest of those; the others are the ties it names. A trial neither as good nor
clearly behind is undecided: it asks for more repeats. Pure functions over scores, so tests
drive them with made-up numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import numpy.typing as npt

from loadtune.asked.trials import BASELINE
from loadtune.core.kinds import Z_ONE_SIDED, RankBy
from loadtune.decide.choice import choose
from loadtune.decide.stats import MACHINE_DRIFT, RERUN_WIDTH
from loadtune.record.interval import Interval

# Each one-sided bound at 95%: together the two make the 90% interval of the TOST procedure.
ONE_SIDED_TAIL_PCT = 5.0
# Repeats (processes) the pick and each contender it is judged against need before the pick is
# called decided: one process's windows alone do not show how much processes differ.
MIN_REPEATS_TO_DECIDE = 2

# A figure's bootstrap draws, one per resample.
Draws = npt.NDArray[np.float64]
# What a config costs to run (trials.cost_of), compared in order: the lower, the cheaper.
Cost = tuple[float, ...]
# A setting change, as (key, value) pairs (verdict.suggestions, as diagnose gives them).
Change = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Scored:
    """One trial's figures as the decision sees them: intervals, and the bootstrap draws they
    came from when the raw samples were at hand (None for trials kept from an earlier run)."""

    name: str
    throughput: Interval | None  # None: the trial did not run
    wait_ratio: Interval | None
    throughput_draws: Draws | None = field(default=None, compare=False, repr=False)
    wait_ratio_draws: Draws | None = field(default=None, compare=False, repr=False)
    repeats: int = 0
    cost: Cost = ()  # what the config costs to run (trials.cost_of): the cheaper of two ties is picked
    suggests: tuple[Change, ...] = ()  # settings its verdict's advice names, as change tuples (verdict.suggestions)

    @property
    def ran(self) -> bool:
        return self.throughput is not None and self.wait_ratio is not None

    @property
    def measured_throughput(self) -> Interval:
        """The throughput interval of a trial that ran (the decisions below are given only those)."""
        return _ran(self.name, self.throughput)

    @property
    def measured_wait_ratio(self) -> Interval:
        """The wait ratio interval of a trial that ran."""
        return _ran(self.name, self.wait_ratio)


def _ran(name: str, interval: Interval | None) -> Interval:
    if interval is None:
        raise ValueError(f"{name}: the trial did not run, so it has no figures to decide on")
    return interval


def _paired(a: Draws | None, b: Draws | None) -> tuple[Draws, Draws] | None:
    """The two trials' draws, where both have them, as many of each."""
    if a is None or b is None or len(a) != len(b) or len(a) == 0:
        return None
    return a, b


def throughput_ratios(a: Scored, b: Scored) -> Draws | None:
    """throughput(a) / throughput(b) over the two trials' bootstrap draws (independent resamples
    of independent runs), where both have them."""
    paired = _paired(a.throughput_draws, b.throughput_draws)
    if paired is None:
        return None
    ratios = paired[0] / paired[1]
    ratios = ratios[np.isfinite(ratios)]
    return ratios if ratios.size else None


def _wait_ratio_excesses(a: Scored, b: Scored) -> Draws | None:
    """wait_ratio(a) - wait_ratio(b) over the two trials' draws, where both have them."""
    paired = _paired(a.wait_ratio_draws, b.wait_ratio_draws)
    if paired is None:
        return None
    diff = paired[0] - paired[1]
    diff = diff[np.isfinite(diff)]
    return diff if diff.size else None


def _one_sided(draws: Draws | None, point: float | None, without: float, upper: bool) -> float:
    """A one-sided 95% bound from the draws (a lower one never above the point estimate, an upper
    one never below it, where there is one); `without` where there are no draws."""
    if draws is None:
        return without
    bound = float(np.percentile(draws, 100 - ONE_SIDED_TAIL_PCT if upper else ONE_SIDED_TAIL_PCT))
    if point is None:
        return bound
    return max(bound, point) if upper else min(bound, point)


def throughput_ratio_lower(a: Scored, b: Scored) -> float:
    """The one-sided 95% lower bound of throughput(a) / throughput(b). From the two trials'
    bootstrap draws where both have them; else, more cautiously, a's lower bound over b's upper
    bound."""
    if a.name == b.name:
        return 1.0
    at, bt = a.measured_throughput, b.measured_throughput
    return _one_sided(throughput_ratios(a, b), at.mean / bt.mean if bt.mean else None,
                      at.lo / bt.hi if bt.hi > 0 else 0.0, upper=False)


def throughput_ratio_upper(a: Scored, b: Scored) -> float:
    """The one-sided 95% upper bound of throughput(a) / throughput(b), as throughput_ratio_lower."""
    if a.name == b.name:
        return 1.0
    at, bt = a.measured_throughput, b.measured_throughput
    return _one_sided(throughput_ratios(a, b), at.mean / bt.mean if bt.mean else None,
                      at.hi / bt.lo if bt.lo > 0 else math.inf, upper=True)


def wait_ratio_excess_upper(a: Scored, b: Scored) -> float:
    """The one-sided 95% upper bound of wait_ratio(a) - wait_ratio(b) (lower is better)."""
    if a.name == b.name:
        return 0.0
    aw, bw = a.measured_wait_ratio, b.measured_wait_ratio
    return _one_sided(_wait_ratio_excesses(a, b), aw.mean - bw.mean, aw.hi - bw.lo, upper=True)


def wait_ratio_excess_lower(a: Scored, b: Scored) -> float:
    """The one-sided 95% lower bound of wait_ratio(a) - wait_ratio(b), as wait_ratio_excess_upper."""
    if a.name == b.name:
        return 0.0
    aw, bw = a.measured_wait_ratio, b.measured_wait_ratio
    return _one_sided(_wait_ratio_excesses(a, b), aw.mean - bw.mean, aw.lo - bw.hi, upper=False)


@dataclass(frozen=True)
class Loss:
    """What a loses to b by one ranking metric, as a share to hold against the tolerance:
    1 - throughput(a) / throughput(b), or wait_ratio(a) - wait_ratio(b); each bound one-sided
    at 95%, and its mean over the two trials' draws."""

    upper: Callable[[Scored, Scored], float]  # a loses at most this much
    lower: Callable[[Scored, Scored], float]  # a loses at least this much
    draws: Callable[[Scored, Scored], Draws | None]  # the loss over the draws
    sort_key: Callable[[Scored], tuple[float, ...]]  # best first


def _throughput_losses(a: Scored, b: Scored) -> Draws | None:
    ratios = throughput_ratios(a, b)
    return 1 - ratios if ratios is not None else None


LOSSES = {
    RankBy.THROUGHPUT: Loss(lambda a, b: 1 - throughput_ratio_lower(a, b),
                            lambda a, b: 1 - throughput_ratio_upper(a, b), _throughput_losses,
                            lambda i: (-i.measured_throughput.mean,)),
    RankBy.WAIT_RATIO: Loss(wait_ratio_excess_upper, wait_ratio_excess_lower, _wait_ratio_excesses,
                            lambda i: (i.measured_wait_ratio.mean, -i.measured_throughput.mean)),
}


def expected_shortfall(a: Scored, b: Scored, by: RankBy = RankBy.THROUGHPUT) -> float | None:
    """What a loses to b on average over the two trials' draws: the mean of max(0, 1 - a/b) of
    their throughputs, or of max(0, wait_ratio(a) - wait_ratio(b)); None without draws."""
    if a.name == b.name:
        return 0.0
    losses = LOSSES[by].draws(a, b)
    return float(np.mean(np.maximum(0.0, losses))) if losses is not None else None


# Pairs of trials (as frozensets of two names) the pipeline model and the data tie: the model
# explains them as equal and their measurements agree within the spread between processes.
Ties = frozenset[frozenset[str]]


def tied(a: Scored, b: Scored, ties: Ties = frozenset()) -> bool:
    return a.name == b.name or frozenset((a.name, b.name)) in ties


def as_good(a: Scored, b: Scored, tolerance: float, by: RankBy = RankBy.THROUGHPUT, ties: Ties = frozenset()) -> bool:
    """Shown to be as good as b, within the tolerance: throughput at least (1 - tolerance) of b's,
    or a wait ratio at most `tolerance` above b's; or tied with it by the model and the data."""
    if ties and tied(a, b, ties):
        return True
    return LOSSES[by].upper(a, b) <= tolerance


def equal_within_noise(a: Scored, b: Scored, tolerance: float, by: RankBy = RankBy.THROUGHPUT) -> bool:
    """Taking a instead of b is expected to lose at most the tolerance, over the two trials'
    draws: they are equal within this machine's noise (False without draws)."""
    shortfall = expected_shortfall(a, b, by)
    return shortfall is not None and shortfall <= tolerance


# The pick may cost, on average over the draws, at most this share of the tolerance against the
# best: so that what it costs seldom exceeds the tolerance itself (at several percent of noise,
# "within the tolerance on average" still loses more than the tolerance about a third of the time).
PICK_SHORTFALL_SHARE = 0.5


def acceptable(a: Scored, best: Scored, tolerance: float, by: RankBy = RankBy.THROUGHPUT,
               ties: Ties = frozenset()) -> bool:
    """Good enough to pick in place of the best: shown as good as it, or expected to cost at most
    PICK_SHORTFALL_SHARE of the tolerance against it."""
    return as_good(a, best, tolerance, by, ties) or \
        equal_within_noise(a, best, tolerance * PICK_SHORTFALL_SHARE, by)


def clearly_behind(a: Scored, leader: Scored, tolerance: float, by: RankBy = RankBy.THROUGHPUT) -> bool:
    """Shown behind the leader by more than the tolerance: the one-sided 95% upper bound of a's
    throughput over the leader's below 1 - tolerance (from both trials' draws; without them,
    a's optimistic bound below the leader's pessimistic one), or its wait ratio's lower excess
    above the tolerance."""
    return LOSSES[by].lower(a, leader) > tolerance


def order(items: Sequence[Scored], by: RankBy = RankBy.THROUGHPUT) -> list[Scored]:
    """Items that ran, best first: highest throughput, or lowest wait ratio then highest throughput."""
    return sorted((i for i in items if i.ran), key=LOSSES[by].sort_key)


def pick(items: Sequence[Scored], tolerance: float, by: RankBy = RankBy.THROUGHPUT,
         ties: Ties = frozenset(), keep: str | None = None) -> Scored | None:
    """The cheapest trial acceptable in place of the best (shown as good, or equal within the
    noise): choice.choose, of equal cost the better; None when none ran. With `keep` (the
    baseline), that trial comes first among the equals, and it stays the pick unless the
    cheapest equal is shown faster than it, by more than the tolerance (shown_ahead): a change
    is recommended only when it is shown to pay."""
    ranked = order(items, by)
    if not ranked:
        return None
    chosen = choose(ranked, lambda i: acceptable(i, ranked[0], tolerance, by, ties),
                    lambda i: (i.name != keep, *i.cost))
    kept = next((i for i in ranked if i.name == keep), None)
    if chosen is None or kept is None or kept is chosen or \
            shown_ahead(chosen, kept, tolerance, by, rivals=len(ranked) - 1):
        return chosen
    return kept


def point_loss(a: Scored, b: Scored, by: RankBy = RankBy.THROUGHPUT) -> float:
    """What a loses to b at the two estimates: 1 - throughput(a) / throughput(b), or
    wait_ratio(a) - wait_ratio(b)."""
    if by == RankBy.WAIT_RATIO:
        return a.measured_wait_ratio.mean - b.measured_wait_ratio.mean
    bt = b.measured_throughput.mean
    return 1 - a.measured_throughput.mean / bt if bt > 0 else 0.0


def shown_ahead(a: Scored, b: Scored, tolerance: float, by: RankBy = RankBy.THROUGHPUT, rivals: int = 1) -> bool:
    """a is shown faster than b and its estimate is ahead by more than the tolerance (the zone):
    what a change from the baseline must show. Shown: b's loss to a above 0 at one-sided 95%
    over the `rivals` configs that could have been the change (Bonferroni: each at 5% / rivals),
    so that among many configs equal to the baseline, noise alone seldom moves the pick."""
    if point_loss(b, a, by) <= tolerance:
        return False
    losses = LOSSES[by].draws(b, a)
    if losses is None:
        return LOSSES[by].lower(b, a) > 0
    return float(np.percentile(losses, ONE_SIDED_TAIL_PCT / max(1, rivals))) > 0


def resolution(spread: float | None, repeats: int) -> float:
    """The smallest difference a sweep resolves between two configs measured in `repeats`
    processes each, at one-sided 95%, given the spread between processes (the pooled log sd of
    a repeat's throughput, or the wait ratio's sd): Z_ONE_SIDED * spread * sqrt(2 / repeats).
    0 before the spread is known."""
    if spread is None or repeats < 1:
        return 0.0
    return Z_ONE_SIDED * spread * math.sqrt(2 / repeats)


def zone(tolerance: float, spread: float | None, repeats: int) -> float:
    """The indifference zone: the larger of the tolerance and what this machine can resolve
    within the sweep's repeats (resolution). Differences inside it are equal; of the equals, the
    cheapest is the pick."""
    return max(tolerance, resolution(spread, repeats))


def behind_bar(leader_samples_per_s: float, tolerance: float, spread: float | None) -> float:
    """The throughput a trial's window must still be able to reach to stay in the race (measure's
    Behind, checked batch by batch): the leader's, less the larger of the tolerance and what one
    process each can resolve (resolution with one repeat: the trial's own process may be a slow
    one), with the machine's usual drift while the sweep has not measured its spread."""
    margin = max(tolerance, resolution(spread if spread is not None else MACHINE_DRIFT.throughput_log_sd, 1))
    return leader_samples_per_s / (1 + margin)


def waiting_gain(wait_ratio: float) -> float:
    """The most a loop that waits `wait_ratio` of its time gains by removing all waiting: 1 / (1 - w) - 1."""
    return math.inf if wait_ratio >= 1 else max(1 / (1 - wait_ratio) - 1, 0.0)


def gain_bound(item: Scored, ideal: Scored | None = None, by: RankBy = RankBy.THROUGHPUT) -> float:
    """The most any config can beat `item` by, from the physics of the pipeline: a config that
    waits a share w of its time gains at most 1 / (1 - w) by removing all waiting (taking the
    upper end of w's interval), and none runs faster than the ideal row (the step alone). As a
    share of throughput; by wait ratio, the points of waiting left to remove."""
    wait = item.measured_wait_ratio.hi
    if by == RankBy.WAIT_RATIO:
        return max(0.0, wait)
    bound = waiting_gain(wait)
    if ideal is not None and ideal.ran and item.measured_throughput.lo > 0:
        bound = min(bound, ideal.measured_throughput.hi / item.measured_throughput.lo - 1)
    return max(0.0, bound)


@dataclass(frozen=True)
class RaceStep:
    """What racing does next: trials to stop (clearly behind), trials to measure again (the pick
    and its strongest undecided rival), the trials equal to the pick (acceptable in its place),
    and whether the pick is decided (every other contender is equal to it or clearly behind)."""

    pick: str | None
    stop: tuple[str, ...]
    again: tuple[str, ...]
    decided: bool
    undecided: tuple[str, ...]  # contenders a rerun might pick that the pick may lose more than the tolerance to
    gap: float  # at most this share of throughput may be left on the table by the pick
    expected: float | None = None  # the pick's largest expected shortfall against them (None: unknown)
    # Contenders a rerun might pick instead (with the pick, RERUN_AGREEMENT of reruns' picks) that
    # the pick is expected to lose at most the zone to, the most often picked first.
    equal: tuple[str, ...] = ()
    zone: float = 0.0  # the indifference zone it was judged at (zone)
    bound: float = math.inf  # the most any config can beat the pick by (gain_bound)


# Whether the pipeline model, off by at most its own error, predicts the first trial (by name)
# ahead of the second by more than the tolerance.
Disputes = Callable[[str, str], bool]
# The configs named beside the pick hold, with it, a rerun's pick at least this often.
RERUN_AGREEMENT = 0.95
# A config a rerun picks less often than this is not named, however many such there are.
RERUN_MIN_SHARE = 0.01
_erf = np.vectorize(math.erf, otypes=[float])


def _ranking_scale(item: Scored, by: RankBy) -> tuple[float, Draws] | None:
    """The item's figure on a scale where higher is better and a difference is a loss (log
    throughput, or the wait ratio negated), with its draws about it; None without draws."""
    if by == RankBy.THROUGHPUT:
        draws, mean = item.throughput_draws, item.measured_throughput.mean
        if draws is None or mean <= 0:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return math.log(mean), np.log(np.where(draws > 0, draws, np.nan)) - math.log(mean)
    draws, mean = item.wait_ratio_draws, item.measured_wait_ratio.mean
    return None if draws is None else (-mean, mean - draws)


def rerun_picks(items: Sequence[Scored], tolerance: float, by: RankBy = RankBy.THROUGHPUT) -> dict[str, float]:
    """How often a rerun of the same sweep on this machine would pick each trial: each trial's
    rerun estimate drawn about its estimate with RERUN_WIDTH times its own spread (the config's
    uncertainty and the rerun's own noise), and the pick rule applied to every draw: the
    cheapest trial whose expected shortfall against that draw's leader is within the tolerance.
    Trials without draws (kept from an earlier run) are left out."""
    scaled = [(i, found) for i in items if i.ran and (found := _ranking_scale(i, by)) is not None]
    if not scaled:
        return {}
    n = min(len(found[1]) for _, found in scaled)
    points = np.array([found[0] for _, found in scaled])
    devs = np.array([found[1][:n] for _, found in scaled])
    devs = np.where(np.isfinite(devs), devs, 0.0)
    se = devs.std(axis=1)
    reruns = points[:, None] + RERUN_WIDTH * devs  # (trials, draws): each column one rerun
    cols = np.arange(n)
    leader = reruns.argmax(axis=0)
    gap = reruns[leader, cols][None, :] - reruns  # what taking each trial loses to the leader
    spread = np.sqrt(se[:, None] ** 2 + se[leader][None, :] ** 2)
    z = gap / np.where(spread > 0, spread, np.inf)
    expected = gap * 0.5 * (1 + _erf(z / math.sqrt(2))) + spread * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    ok = expected <= tolerance * PICK_SHORTFALL_SHARE
    ok[leader, cols] = True
    by_cost = sorted(range(len(scaled)), key=lambda j: (scaled[j][0].cost, -points[j]))
    place = np.empty(len(scaled))
    place[by_cost] = np.arange(len(scaled))
    picked = np.where(ok, place[:, None], np.inf).argmin(axis=0)
    counts = np.bincount(picked, minlength=len(scaled))
    return {item.name: float(counts[j]) / n for j, (item, _) in enumerate(scaled)}


def rerun_ties(pick: str, shares: dict[str, float]) -> list[str]:
    """The trials beside `pick` that, with it, hold RERUN_AGREEMENT of a rerun's picks, the most
    often picked first (none picked less often than RERUN_MIN_SHARE)."""
    named: list[str] = []
    held = shares.get(pick, 0.0)
    for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        if held >= RERUN_AGREEMENT or share < RERUN_MIN_SHARE:
            break
        if name != pick:
            named.append(name)
            held += share
    return named


def race_step(items: Sequence[Scored], tolerance: float, max_repeats: int, by: RankBy = RankBy.THROUGHPUT,
              stopped: frozenset[str] = frozenset(), may_stop: bool = True, ties: Ties = frozenset(),
              disputes: Disputes | None = None, spread: float | None = None,
              ideal: Scored | None = None) -> RaceStep:
    """One step of the race among the trials that ran and were not stopped before, judged at the
    indifference zone (zone: the tolerance, or what `max_repeats` processes resolve at the
    pooled `spread`, the larger): the pick and its strongest undecided rival are asked for one
    more repeat each. Repeats already at `max_repeats` (or kept from an earlier run, with none
    measured now: repeats 0) are not asked for again. Without `may_stop`, none is stopped, and
    none is called equal or decided: the intervals cannot show yet how much whole processes
    differ. A contender the model predicts ahead of the pick (`disputes`) is raced first,
    whatever its few processes read. Once no config can beat the pick by more than the zone
    (gain_bound: its wait ratio, the ideal row), nothing is left to race."""
    live = [i for i in order(items, by) if i.name not in stopped]
    if not live:
        return RaceStep(None, (), (), False, (), 0.0)
    width = zone(tolerance, spread, max_repeats) if may_stop else tolerance
    leader = live[0]
    stop = tuple(i.name for i in live if may_stop and clearly_behind(i, leader, width, by))
    live = [i for i in live if i.name not in stop]
    chosen = pick(live, width, by, ties, keep=BASELINE) if may_stop else live[0]
    assert chosen is not None
    bound = gain_bound(chosen, ideal, by)
    enough = min(MIN_REPEATS_TO_DECIDE, max_repeats)
    equal, undecided = _rivals(live, chosen, width, by, may_stop, ties, disputes if bound > width else None)
    if bound <= width and may_stop:  # nothing left can beat the pick by more than the zone
        equal, undecided = [*equal, *undecided], []
    # A duel: the pick and its strongest rival, the undecided contender most likely to be as
    # good. Repeats for weaker rivals rarely change the pick, and at a few percent of noise
    # between processes each would take all its repeats; once the strongest rival and the pick
    # are at their limit, racing ends, and the summary names what is still undecided.
    rival = undecided[:1]
    again = [i for i in [chosen, *rival] if rival and 0 < i.repeats < max_repeats]
    if not undecided and 0 < chosen.repeats < enough and bound > width:
        again = [chosen]  # one process alone does not show how much processes differ
    gap, expected = _left_on_table(chosen, undecided, width, by)
    decided = not undecided and may_stop and ((chosen.repeats or enough) >= enough or bound <= width)
    return RaceStep(chosen.name, stop, tuple(dict.fromkeys(i.name for i in again)), decided,
                    tuple(i.name for i in undecided), min(gap, max(bound, width)), expected,
                    tuple(i.name for i in equal), width, bound)


def _rivals(live: Sequence[Scored], chosen: Scored, width: float, by: RankBy, may_stop: bool, ties: Ties,
            disputes: Disputes | None) -> tuple[list[Scored], list[Scored]]:
    """The configs a rerun might pick instead of the pick (rerun_picks): equal where the pick is
    expected to lose at most the zone to them, else undecided (the pick may lose more: race
    them), a contender the model disputes first. Before the noise between processes is known,
    every other contender is undecided. Trials without draws (kept from an earlier run: no raw
    samples now) are judged on their intervals as they are."""
    named = rerun_ties(chosen.name, rerun_picks(live, width, by)) if may_stop else \
        [i.name for i in live if i.name != chosen.name]
    by_name = {i.name: i for i in live}
    fine = {n for n in named if may_stop and acceptable(chosen, by_name[n], width, by, ties)}
    if disputes is not None:
        # A contender the model predicts ahead of the pick, whatever its few processes read, is the
        # most worth measuring again.
        disputed = [i.name for i in live if i.name != chosen.name and disputes(i.name, chosen.name)]
        fine -= set(disputed)
        named = [*disputed, *(n for n in named if n not in disputed)]
    undecided = [by_name[n] for n in named if n not in fine]
    undecided += [i for i in live if _ranking_scale(i, by) is None and i.name != chosen.name
                  and i.name not in named and not as_good(chosen, i, width, by)]
    return [by_name[n] for n in named if n in fine], undecided


def _left_on_table(chosen: Scored, undecided: Sequence[Scored], tolerance: float,
                   by: RankBy) -> tuple[float, float | None]:
    """What the pick may leave on the table against the undecided contenders: at most (never less
    than the tolerance), and expected (its largest expected shortfall; None where any is unknown)."""
    gap = max((_shortfall(chosen, i, by) for i in undecided), default=tolerance)
    shortfalls = [s for i in undecided if (s := expected_shortfall(chosen, i, by)) is not None]
    expected = max(shortfalls) if shortfalls and len(shortfalls) == len(undecided) else None
    return max(gap, tolerance), expected


def _shortfall(chosen: Scored, other: Scored, by: RankBy) -> float:
    """How far behind `other` the pick may be at most: 1 - the lower bound of their throughput
    ratio (or the wait ratio's upper excess)."""
    return max(0.0, LOSSES[by].upper(chosen, other))
