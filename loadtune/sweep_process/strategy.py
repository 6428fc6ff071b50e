"""How to search the settings: one change at a time, then what the pipeline model cannot rule
out (model, the default), one change at a time with follow-up rounds on the winner (ofat),
coordinate descent (greedy), or every combination (grid). A strategy decides which trials to
measure next from the scores of those already measured; measuring is a callback (which also
races the repeats), so tests drive a strategy with a fake measurer."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

from loadtune.asked.config import Config
from loadtune.asked.plan import (
    Settings,
    baseline_trial,
    changes_from_baseline,
    combined_trial,
    config_key,
    grid_plan,
    ofat_plan,
    on_top,
    swept_values,
)
from loadtune.asked.trials import IDEAL, Trial, cost_of
from loadtune.core.kinds import TOLERANCE, RankBy, Strategy
from loadtune.decide.choice import beats, choose, within_tolerance
from loadtune.decide.ranking import rank
from loadtune.decide.selection import Scored, order, pick
from loadtune.record.findings import MODEL_FIT_ERROR

# config_key and Settings (plan) are also found here, beside the strategies that compare configs by them.
__all__ = ["MAX_GREEDY_ROUNDS", "MAX_MODEL_ROUNDS", "Measure", "Modeler", "Search", "Settings", "TARGETS_PER_ROUND",
           "config_key", "follow_advice", "model_targets", "run_strategy", "search_greedy", "search_grid",
           "search_model", "search_ofat"]

if TYPE_CHECKING:
    from loadtune.model.fitted import PipelineModel

# The model strategy measures at most this many follow-up rounds after the first, each of at most
# TARGETS_PER_ROUND configs. Near the best, configs a few percent apart cannot be told apart by
# one process each (processes differ by several percent): more rounds would measure the plateau
# config by config and pick the luckiest. What is left unmeasured keeps its predicted row.
MAX_MODEL_ROUNDS = 1
MAX_GREEDY_ROUNDS = 4
MAX_FOLLOW_UP_ROUNDS = 4
# A value whose throughput was below this share of the best of its key's last sweep is not
# swept again on another base: what the companion settings change is far smaller than that.
FAR_BEHIND = 0.75

# Measure these trials (round number given) and return the score of each, by trial name.
Measure = Callable[[Sequence[Trial], int], Mapping[str, Scored]]


class Modeler(Protocol):
    """What the model strategy needs of the runner: the pipeline model fitted to every trial
    measured so far, and how well it predicts a trial it was not fitted to."""

    def fit(self) -> PipelineModel | None: ...  # None with too few trials
    def held_out_error(self) -> float | None: ...
    def error(self) -> float | None: ...  # how far off its predictions have been (see Modelling.error)
    def fell_back(self, error: float | None) -> None: ...  # told when the sweep measures as ofat instead


@dataclass(frozen=True)
class Search:
    """What a strategy works with: the config and the machine (whether it has an accelerator),
    how to measure a set of trials, how trials are ranked and the tolerance of a tie, and, for
    the model strategy, the runner's model."""

    config: Config
    accelerator: bool
    measure: Measure
    by: RankBy = RankBy.THROUGHPUT
    tolerance: float = TOLERANCE
    modeler: Modeler | None = None


def _placed(scores: Mapping[str, Scored], trials: Sequence[Trial], by: RankBy,
            tolerance: float) -> list[tuple[Trial, int | None]]:
    placings = rank([scores[t.name] for t in trials if t.name in scores], by, tolerance)
    return [(t, placings[t.name].rank if t.name in placings else None) for t in trials]


def _winner(scores: Mapping[str, Scored], trials: Mapping[str, Trial], by: RankBy, tolerance: float,
            where: Callable[[Trial], bool] = lambda t: True) -> Trial | None:
    """The pick among the measured trials that `where` admits: the cheapest as good as the best."""
    chosen = pick([s for name, s in scores.items() if name in trials and name != IDEAL and where(trials[name])],
                  tolerance, by)
    return trials[chosen.name] if chosen is not None else None


def _far_behind(members: Mapping[str, str], scores: Mapping[str, Scored]) -> set[str]:
    """Of one key's sweep (its values, as repr, to the trials that measured them), the values
    whose throughput was below FAR_BEHIND of the sweep's best."""
    ran = {value: scores[name] for value, name in members.items() if name in scores and scores[name].ran}
    if not ran:
        return set()
    best = max(s.measured_throughput.mean for s in ran.values())
    return {value for value, s in ran.items() if s.measured_throughput.mean < FAR_BEHIND * best}


def _needs_workers(trial: Trial) -> bool:
    return trial.skipped and "num_workers=0" in (trial.skip_reason or "")


def _others(trial: Trial, key: str, config: Config) -> tuple[tuple[str, str], ...]:
    """The trial's changes from the baseline, all but `key`: what a sweep of `key` sits on."""
    return tuple(sorted((k, repr(v)) for k, v in changes_from_baseline(config, trial).items() if k != key))


def search_ofat(search: Search) -> None:
    """Round 1: the baseline and each single change from it. Then, when the winner is not the
    baseline, follow-up rounds on the winner while a round's winner gains more than the
    tolerance (see _Ofat.sweep_on). Keys the baseline made invalid (settings that need workers,
    with num_workers=0) are measured on top of the best worker count. Then `combined` (every key
    at its best value) when that is a new trial, and what the pick's verdict advises."""
    run = _Ofat.first_round(search)
    winner = run.winner()
    while winner is not None and run.round_no <= MAX_FOLLOW_UP_ROUNDS:
        base_trial, keys = run.follow_up_on(winner)
        if base_trial is None or not keys:
            break
        new, sweeps = run.sweep_on(base_trial, keys)
        if not new:
            break
        run.measure_round(new, sweeps)
        best = run.winner()
        if best is None or best.name == winner.name or not _gains(run.scores[best.name], run.scores[winner.name],
                                                                   search.by, search.tolerance):
            break
        winner = best
    run.measure_deferred()
    run.measure_combined()
    follow_advice(search, run.scores, run.known, run.round_no)


@dataclass
class _Ofat:
    """Where an ofat search stands: what it measured, and what each key was last swept on."""

    search: Search
    first: list[Trial]  # round 1's trials, the baseline first
    # Settings that need workers, planned on a baseline without any: measured on a worker count
    # instead, in a follow-up round; rows saying why they were not only if none could be.
    deferred: list[Trial]
    known: dict[str, Trial]
    scores: dict[str, Scored]
    asked: list[Trial]  # every trial measured, in the order asked for
    swept_on: dict[str, tuple[tuple[str, str], ...]]  # key -> the other settings it was last swept on
    far: dict[str, set[str]]  # key -> values far behind in its last sweep (by throughput): not swept again
    round_no: int = 1

    @classmethod
    def first_round(cls, search: Search) -> _Ofat:
        """Measure the baseline and each single change from it (but the deferred)."""
        config = search.config
        planned = ofat_plan(config, search.accelerator)
        known = {t.name: t for t in planned}
        deferred = [t for t in planned if _needs_workers(t)]
        trials = [t for t in planned if t not in deferred]
        scores = dict(search.measure(trials, 1))
        baseline = trials[0]
        deferred_keys = {t.changed for t in deferred}
        swept_on = {key: _others(baseline, key, config) for key in config.sweep if key not in deferred_keys}
        far: dict[str, set[str]] = {}
        if search.by == RankBy.THROUGHPUT:
            for key in swept_on:
                members = {repr(t.value): t.name for t in trials if t.changed == key}
                members[repr(config.loader.setting(key))] = baseline.name
                far[key] = _far_behind(members, scores)
        return cls(search, trials, deferred, known, scores, list(trials), swept_on, far)

    def winner(self, where: Callable[[Trial], bool] = lambda t: True) -> Trial | None:
        return _winner(self.scores, self.known, self.search.by, self.search.tolerance, where)

    def follow_up_on(self, winner: Trial) -> tuple[Trial | None, list[str]]:
        """The trial the next round builds on, and the keys it sweeps: on a winner other than the
        baseline, each key whose companions moved since it was last swept; on the baseline, only
        what it could not measure, on the best trial with workers."""
        config = self.search.config
        if winner.name == self.first[0].name:
            deferred_keys = {t.changed for t in self.deferred}
            return (self.winner(lambda t: t.loader_kwargs.get("num_workers", 0) > 0),
                    [k for k in config.sweep if k in deferred_keys])
        return winner, [k for k in config.sweep if self.swept_on.get(k) != _others(winner, k, config)]

    def sweep_on(self, base_trial: Trial, keys: Sequence[str]) -> tuple[list[Trial], dict[str, dict[str, str]]]:
        """The new trials of a round: each of the keys' values one at a time on top of `base_trial`
        (a worker count that lost without persistent workers may win with them: a first repeat is
        too noisy to climb one step at a time), but for values far behind in a sweep of their key.
        With them, each key's sweep (value, as repr, to the trial that measures it)."""
        new = []
        measured = {t.settings: t.name for t in self.known.values()}
        sweeps: dict[str, dict[str, str]] = {}
        values_of = swept_values(self.search.config)
        for key in keys:
            self.swept_on[key] = _others(base_trial, key, self.search.config)
            sweeps[key] = {}
            for value in values_of[key]:
                if repr(value) in self.far.get(key, ()):
                    continue
                trial = on_top(self.search.config, base_trial, {key: value}, self.search.accelerator)
                if not trial.skipped:
                    sweeps[key][repr(value)] = measured.get(trial.settings, trial.name)
                # A refusal says nothing new here; nor do settings measured under another name
                # (no workers on top of a prefetch depth: the prefetch goes, as it must).
                if trial.name not in self.known and not trial.skipped and trial.settings not in measured:
                    self.known[trial.name] = trial
                    measured[trial.settings] = trial.name
                    new.append(trial)
        return new, sweeps

    def measure_round(self, new: Sequence[Trial], sweeps: Mapping[str, Mapping[str, str]]) -> None:
        """Measure a follow-up round and note the values now far behind in each key's sweep."""
        self.round_no += 1
        self.scores.update(self.search.measure(new, self.round_no))
        self.asked.extend(new)
        if self.search.by == RankBy.THROUGHPUT:
            for key, members in sweeps.items():
                self.far[key] = self.far.get(key, set()) | _far_behind(members, self.scores)

    def measure_deferred(self) -> None:
        """The deferred trials no follow-up round measured a value of, as round 1's: their rows
        say why they could not run."""
        config = self.search.config
        measured_keys = {key for t in self.asked if not t.skipped for key in changes_from_baseline(config, t)}
        unmeasured = [t for t in self.deferred if t.changed not in measured_keys]
        if unmeasured:
            self.search.measure(unmeasured, 1)
            self.asked.extend(unmeasured)

    def measure_combined(self) -> None:
        """`combined` (every key at its round-1 best value), when it is a new trial."""
        placed = _placed(self.scores, self.first, self.search.by, self.search.tolerance)
        combined = combined_trial(self.search.config, placed, self.search.accelerator)
        if combined is not None and combined.settings not in {t.settings for t in self.known.values()}:
            self.round_no += 1
            self.known[combined.name] = combined
            self.scores.update(self.search.measure([combined], self.round_no))
            self.asked.append(combined)


def follow_advice(search: Search, scores: dict[str, Scored], known: dict[str, Trial], round_no: int) -> None:
    """Measure what the pick's verdict advises on top of it, when that changes only settings the
    config sweeps (more workers, a deeper prefetch, persistent workers; in_order=False only where
    `in_order` is swept: it changes the batches' order) and is not measured yet: one more round,
    its trials marked as asked for by that verdict, so the summary cites a measurement, never a
    guess."""
    chosen = _winner(scores, known, search.by, search.tolerance)
    if chosen is None or not scores[chosen.name].suggests:
        return
    new = []
    measured = {config_key(t) for t in known.values()}
    for change in scores[chosen.name].suggests:
        if any(key not in search.config.sweep for key, _ in change):
            continue
        trial = on_top(search.config, chosen, dict(change), search.accelerator)
        if trial.name not in known and not trial.skipped and config_key(trial) not in measured:
            trial = dataclasses.replace(trial, asked_by=chosen.name)
            known[trial.name] = trial
            measured.add(config_key(trial))
            new.append(trial)
    if new:
        scores.update(search.measure(new, round_no + 1))


def _gains(new: Scored, old: Scored, by: RankBy, tolerance: float) -> bool:
    """Whether a round's winner is better than the last by more than the tolerance."""
    if by == RankBy.THROUGHPUT:
        return beats(new.measured_throughput.mean, old.measured_throughput.mean, tolerance)
    return beats(new.measured_wait_ratio.mean, old.measured_wait_ratio.mean, tolerance, by)


def search_grid(search: Search) -> None:
    """Every combination of the swept values in one round: the reference the others are checked against."""
    trials = grid_plan(search.config, search.accelerator)
    scores = dict(search.measure(trials, 1))
    follow_advice(search, scores, {t.name: t for t in trials}, 1)


def search_greedy(search: Search) -> None:
    """Coordinate descent: sweep one key with the others at their current best, move to another
    value only when it is not shown as good as the current setting within the tolerance and is
    ahead, go to the next key; repeat whole rounds until one moves nothing (or MAX_GREEDY_ROUNDS)."""
    current = baseline_trial(search.config)
    scores = dict(search.measure([current], 1))
    known = {current.name: current}
    swept_with: dict[str, Settings] = {}  # key -> the other settings when it was last swept
    last_round = 1
    for round_no in range(1, MAX_GREEDY_ROUNDS + 1):
        moved = False
        for key in search.config.sweep:
            others = tuple((k, v) for k, v in current.settings if k != key)
            if swept_with.get(key) == others:
                continue  # nothing else moved since: sweeping it again would repeat the same answer
            swept_with[key] = others
            candidates = _greedy_candidates(search, current, key)
            new = [t for t in candidates.values() if t.name not in scores]
            if new:
                scores.update(search.measure(new, round_no))
                known.update((t.name, t) for t in new)
                last_round = round_no
            ran = [scores[n] for n in candidates if n in scores and scores[n].ran]
            if not ran:
                continue
            placings = rank(ran, search.by, search.tolerance)
            if current.name not in placings or placings[current.name].rank != 1:
                current, moved = candidates[order(ran, search.by)[0].name], True
        if not moved:
            break
    follow_advice(search, scores, known, last_round)


def _greedy_candidates(search: Search, current: Trial, key: str) -> dict[str, Trial]:
    """The current trial and each value of `key` on top of it, by name."""
    candidates: dict[str, Trial] = {current.name: current}
    for value in swept_values(search.config)[key]:
        trial = on_top(search.config, current, {key: value}, search.accelerator)
        candidates.setdefault(trial.name, trial)
    return candidates


def _ruled_in(trial: Trial, scores: Mapping[str, Scored], measured: Mapping[Settings, str]) -> bool:
    """A config that can still be picked: not measured yet, or measured and it ran."""
    name = measured.get(config_key(trial))
    return name is None or (name in scores and scores[name].ran)


def _score(model: PipelineModel, trial: Trial, by: RankBy) -> float:
    """The model's figure for a config, higher better (the wait ratio negated)."""
    predicted = model.predict(trial.loader_kwargs)
    return predicted.throughput if by == RankBy.THROUGHPUT else -predicted.wait_ratio


def _optimistic(score: float, error: float, by: RankBy) -> float:
    """A prediction raised by the model's own error: what the config may do if the model is off."""
    return score * (1 + error) if by == RankBy.THROUGHPUT else score + error


# At most this many configs are measured in one round of the model strategy, the most promising
# first (what is left is raced only where the refitted model predicts it ahead of the pick).
TARGETS_PER_ROUND = 3


def model_targets(space: Sequence[Trial], scores: Mapping[str, Scored], measured: Mapping[Settings, str],
                  model: PipelineModel, by: RankBy, tolerance: float, error: float = 0.0) -> list[Trial]:
    """What the model cannot rule out, not measured yet. On the model's own scale (measured
    configs predicted too: the fit has seen them, and a prediction set against a measurement
    would chase each process's luck): the cheapest config predicted within the tolerance of the
    predicted best (the pick, if the model is right); the predicted best when it is predicted
    ahead of every measured config by more than the tolerance or does not hide the fetch (the
    model's resolution is coarse there); and every config that could move the pick if the model
    is off by its own measured `error`: a cheaper one the model cannot put below the best by
    more than the tolerance, and one it cannot put within the tolerance of that cheapest pick.
    So one wrong point prediction never drops the winner. Both measured, or predicted level with
    a measured one: nothing left to learn."""
    live = [t for t in space if _ruled_in(t, scores, measured)]
    if not live:
        return []
    score = {t.name: _score(model, t, by) for t in live}
    best = max(score.values())
    top = max(live, key=lambda t: score[t.name])
    cheapest = choose(live, lambda t: within_tolerance(score[t.name], best, tolerance, by),
                      lambda t: cost_of(t.loader_kwargs)) or top
    done = [score[t.name] for t in live if config_key(t) in measured]
    ahead = not done or not within_tolerance(max(done), score[top.name], tolerance, by)
    # Where the cores or a close race of queues set the pace, the model cannot tell configs a
    # few percent apart: the predicted best is measured beside the cheapest.
    coarse = not model.predict(top.loader_kwargs).fetch_hidden
    hoped = {t.name: _optimistic(score[t.name], error, by) for t in live}
    cheaper = [t for t in live if cost_of(t.loader_kwargs) < cost_of(cheapest.loader_kwargs)
               and within_tolerance(hoped[t.name], best, tolerance, by)]
    beating = [t for t in live if not within_tolerance(score[cheapest.name], hoped[t.name], tolerance, by)]
    unsure = sorted(dict.fromkeys([*cheaper, *beating]), key=lambda t: -hoped[t.name])
    wanted = [cheapest] + ([top] if ahead or coarse else []) + unsure
    return [t for t in dict.fromkeys(wanted) if config_key(t) not in measured][:TARGETS_PER_ROUND]


def search_model(search: Search) -> None:
    """Round 1 as ofat: the baseline and each single change from it (settings that need workers,
    with a baseline that has none, are left to the model). Then the pipeline model, fitted to all
    measured trials and refitted after every round, predicts every config of the space (every
    combination of the swept values and the baseline's); what it cannot rule out, with its own
    error, is measured (model_targets), for at most MAX_MODEL_ROUNDS rounds. Then what the pick's
    verdict advises. When the model predicts the first round's trials badly (MODEL_FIT_ERROR),
    as ofat."""
    modeler = search.modeler
    if modeler is None:
        raise ValueError("the model strategy needs the runner's model")
    trials = [t for t in ofat_plan(search.config, search.accelerator) if not _needs_workers(t)]
    scores = dict(search.measure(trials, 1))
    model = modeler.fit()
    error = modeler.held_out_error()
    if model is None or error is None or error > MODEL_FIT_ERROR:
        modeler.fell_back(error)
        search_ofat(search)
        return
    space = [t for t in grid_plan(search.config, search.accelerator) if not t.skipped]
    measured = {config_key(t): t.name for t in trials}
    known = {t.name: t for t in trials}
    round_no = 1
    while round_no <= MAX_MODEL_ROUNDS and model is not None:
        new = model_targets(space, scores, measured, model, search.by, search.tolerance, modeler.error() or 0.0)
        if not new:
            break
        round_no += 1
        scores.update(search.measure(new, round_no))
        for t in new:
            measured[config_key(t)] = t.name
            known[t.name] = t
        model = modeler.fit()
    follow_advice(search, scores, known, round_no)


STRATEGIES: dict[Strategy, Callable[[Search], None]] = {
    Strategy.MODEL: search_model, Strategy.OFAT: search_ofat, Strategy.GREEDY: search_greedy,
    Strategy.GRID: search_grid,
}


def run_strategy(name: Strategy | str, search: Search) -> None:
    """Measure what the named strategy asks for (a ValueError for a name it does not know)."""
    STRATEGIES[Strategy(name)](search)

