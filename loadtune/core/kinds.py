"""The fixed sets a sweep is described by, as `str` enums (they compare equal to, and are
written as, their values: the CSV and `--json` hold the plain words), and the one default
margin of practical equivalence."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A member that prints as its value: `str(Status.OK) == "ok"`."""

    def __str__(self) -> str:
        return str(self.value)


class Status(Word):
    """How a trial's row ended (docs/reference.md, the CSV's `status`)."""

    OK = "ok"
    SKIPPED = "skipped"  # refused before it ran (reason says why)
    FAILED = "failed"
    TIMEOUT = "timeout"
    PREDICTED = "predicted"  # a config the pipeline model scored and the sweep never measured
    WATCHED = "watched"  # measured in a real training run (loadtune watch), not a sweep trial
    TUNED = "tuned"  # one setting tried in a tuned training run (loadtune.tune); the kept one's rows are watched


class Strategy(Word):
    """Which trials a sweep measures (`--strategy`)."""

    MODEL = "model"  # one change at a time, then what the fitted pipeline model cannot rule out
    OFAT = "ofat"  # one change at a time from the baseline, then follow-up rounds on the winner
    GREEDY = "greedy"  # coordinate descent
    GRID = "grid"  # every combination


class RankBy(Word):
    """What ranks the trials (`--rank-by`)."""

    THROUGHPUT = "throughput"  # samples/s, higher is better
    WAIT_RATIO = "wait_ratio"  # lower is better


class EndedBy(Word):
    """What ended the racing when the pick was not decided."""

    BUDGET = "budget"  # --budget ran out
    REPEATS = "repeats"  # measure.repeats ran out
    KEPT = "kept"  # a contender kept from the file by --resume without its raw samples


def choices(kind: type[Word]) -> str:
    """The values of an enum, for messages: "model, ofat, greedy or grid"."""
    values = [member.value for member in kind]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


# Configs whose throughput is within this share of each other are as good (measure.tolerance,
# predict --tolerance).
TOLERANCE = 0.03
# Share of the usable cores other processes may use during a window before it is measured again
# (measure.max_outside_cpu; a tuned run's windows), and how many times at most.
MAX_OUTSIDE_CPU = 0.25
MAX_REDONE = 2
# The one-sided 95% quantile of the normal: a difference of Z_ONE_SIDED standard errors is shown
# (the sweep's decisions), and a window's rest is bounded by it (racing inside a window).
Z_ONE_SIDED = 1.645
