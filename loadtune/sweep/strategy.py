"""How to search the settings: one change at a time (ofat), coordinate descent (greedy), or
every combination (grid). A strategy decides which trials to measure next from the scores of
those already measured; measuring is a callback, so tests drive it with a fake measurer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from loadtune.config import Config
from loadtune.trials import Trial
from loadtune.sweep.plan import baseline_trial, combined_trial, grid_plan, ofat_plan, trial_for
from loadtune.sweep.ranking import Scored, order, rank

STRATEGIES = ("ofat", "greedy", "grid")
MAX_GREEDY_ROUNDS = 4

# Measure these trials (round number given) and return the score of each, by trial name.
Measure = Callable[[Sequence[Trial], int], dict[str, Scored]]


@dataclass(frozen=True)
class Visit:
    """A trial the strategy asked for, and the round that asked for it."""

    trial: Trial
    round: int


def _placed(scores: dict[str, Scored], trials: Sequence[Trial], by: str) -> list[tuple[Trial, int | None]]:
    placings = rank([scores[t.name] for t in trials if t.name in scores], by)
    return [(t, placings[t.name].rank if t.name in placings else None) for t in trials]


def run_ofat(config: Config, accelerator: bool, measure: Measure, by: str = "throughput") -> list[Visit]:
    """Baseline and each single change; then `combined`, every key at its best value, if new."""
    trials = ofat_plan(config, accelerator)
    scores = measure(trials, 1)
    visits = [Visit(t, 1) for t in trials]
    combined = combined_trial(config, _placed(scores, trials, by), accelerator)
    if combined is not None:
        measure([combined], 2)
        visits.append(Visit(combined, 2))
    return visits


def run_grid(config: Config, accelerator: bool, measure: Measure, by: str = "throughput") -> list[Visit]:
    """Every combination of the swept values in one round: the reference the others are checked against."""
    trials = grid_plan(config, accelerator)
    measure(trials, 1)
    return [Visit(t, 1) for t in trials]


def run_greedy(config: Config, accelerator: bool, measure: Measure, by: str = "throughput") -> list[Visit]:
    """Coordinate descent: sweep one key with the others at their current best, keep the
    winner only when it beats the current setting beyond noise, go to the next key; repeat
    whole rounds until one brings no significant gain (or MAX_GREEDY_ROUNDS)."""
    current = baseline_trial(config)
    scores = dict(measure([current], 1))
    visits = [Visit(current, 1)]
    swept_with: dict[str, tuple] = {}  # key -> the other settings when it was last swept
    for round_no in range(1, MAX_GREEDY_ROUNDS + 1):
        moved = False
        for key in config.sweep:
            others = tuple((k, v) for k, v in current.settings if k != key)
            if swept_with.get(key) == others:
                continue  # nothing else moved since: sweeping it again would repeat the same answer
            swept_with[key] = others
            base_settings = {k: v for k, v in current.settings}
            candidates: dict[str, Trial] = {current.name: current}
            for value in config.sweep[key]:
                trial = trial_for(config, {**_changes(config, base_settings), key: value}, accelerator)
                candidates.setdefault(trial.name, trial)
            new = [t for t in candidates.values() if t.name not in scores]
            if new:
                scores.update(measure(new, round_no))
                visits.extend(Visit(t, round_no) for t in new)
            ran = [scores[n] for n in candidates if n in scores and scores[n].throughput is not None]
            if not ran:
                continue
            placings = rank(ran, by)
            if current.name not in placings or placings[current.name].rank != 1:
                current, moved = candidates[order(ran, by)[0].name], True
        if not moved:
            break
    return visits


def _changes(config: Config, settings: dict) -> dict:
    """The settings of a trial as changes from the baseline, to rebuild it with one key moved."""
    base = config.loader.model_dump()
    return {k: v for k, v in settings.items() if k in base and (type(v) is not type(base[k]) or v != base[k])}


def run_strategy(name: str, config: Config, accelerator: bool, measure: Measure, by: str = "throughput") -> list[Visit]:
    runner = {"ofat": run_ofat, "greedy": run_greedy, "grid": run_grid}.get(name)
    if runner is None:
        raise ValueError(f"strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    return runner(config, accelerator, measure, by)
