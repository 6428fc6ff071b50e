"""Close calls settled in pairs: the pick and its strongest rival measured in adjacent processes,
their order alternated (first, second; second, first; ...: ABBA), so the machine's drift, which
moves processes close in time together, falls on both alike and cancels in each pair's ratio.

A machine's speed wanders over seconds to minutes (its neighbours, its memory bandwidth): two
processes run one after the other read much closer to each other than two run minutes apart
(benchmarks/paired.py). Each pair gives one log ratio; their mean is the estimate and their own
spread, pooled over the sweep's pairs (a machine's property, as the spread between processes is),
its uncertainty: the paired t interval, whose tails for few degrees of freedom (6.3 standard
errors at one) keep two pairs that happen to agree from settling a call the machine cannot. Pure
functions over numbers, so tests drive them with made-up pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Sequence

from loadtune.decide.stats import window_figures
from loadtune.record.measurement import Measurement

# Student's t, one-sided 95%, by degrees of freedom (1 to 10); beyond, the normal's with the
# Cornish-Fisher expansion to the second order (within 0.1% of t's from 11).
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812)
_Z95 = 1.645


def t_one_sided_95(dof: int) -> float:
    """Student's t quantile at one-sided 95% for `dof` degrees of freedom (at least 1)."""
    if dof < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if dof <= len(_T95):
        return _T95[dof - 1]
    z = _Z95
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


class PairedOutcome(str, Enum):
    """What a paired close call shows at the zone: the two equal, one ahead, or not yet either."""

    EQUAL = "equal"
    FIRST_AHEAD = "first ahead"
    SECOND_AHEAD = "second ahead"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class PairedCall:
    """Two configs measured in adjacent processes: each pair's log throughput of `second` less
    `first`'s, in the order the pairs ran."""

    first: str
    second: str
    log_ratios: tuple[float, ...] = ()

    def plus(self, log_ratio: float) -> "PairedCall":
        return PairedCall(self.first, self.second, (*self.log_ratios, log_ratio))

    def facing(self, name: str) -> "PairedCall":
        """The same call with `name` first."""
        if name == self.first:
            return self
        return PairedCall(self.second, self.first, tuple(-r for r in self.log_ratios))


@dataclass(frozen=True)
class Judged:
    """A paired call judged at the zone: the ratio of second to first (their throughputs), its
    one-sided 95% bounds (together the 90% interval of the two one-sided tests), and the outcome."""

    call: PairedCall
    ratio: float
    low: float
    high: float
    outcome: PairedOutcome

    def to_json(self) -> dict[str, object]:
        return {"first": self.call.first, "second": self.call.second, "log_ratios": list(self.call.log_ratios),
                "ratio": self.ratio, "low": self.low, "high": self.high, "outcome": self.outcome.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Judged":
        """A judged call as to_json wrote it; ValueError (or KeyError, TypeError) where it is not."""
        logs = tuple(float(r) for r in data["log_ratios"])
        first, second = data["first"], data["second"]
        if not isinstance(first, str) or not isinstance(second, str):
            raise ValueError("a paired call's first and second must be trial names")
        return cls(PairedCall(first, second, logs), float(data["ratio"]), float(data["low"]), float(data["high"]),
                   PairedOutcome(data["outcome"]))

    def facing(self, name: str) -> "Judged":
        """The judged call with `name` first (its ratio, bounds and outcome turned round)."""
        if name == self.call.first:
            return self
        turned = {PairedOutcome.FIRST_AHEAD: PairedOutcome.SECOND_AHEAD,
                  PairedOutcome.SECOND_AHEAD: PairedOutcome.FIRST_AHEAD}.get(self.outcome, self.outcome)
        return Judged(self.call.facing(name), 1 / self.ratio, 1 / self.high, 1 / self.low, turned)


def paired_spread(calls: Sequence[PairedCall]) -> tuple[float, int] | None:
    """The spread of one pair's log ratio and its degrees of freedom: each call's pairs about their
    own mean, pooled over the calls; None before any call has two pairs."""
    ss, dof = 0.0, 0
    for call in calls:
        n = len(call.log_ratios)
        if n >= 2:
            mean = sum(call.log_ratios) / n
            ss += sum((r - mean) ** 2 for r in call.log_ratios)
            dof += n - 1
    return (math.sqrt(ss / dof), dof) if dof else None


def judge(call: PairedCall, zone: float, spread: float, dof: int) -> Judged | None:
    """The call at the indifference zone (a share of throughput): equal when both one-sided 95%
    bounds of the ratio lie within 1 -/+ zone; one ahead when the other's ratio to it is below
    1 - zone even at its upper bound; else undecided. None before any pair."""
    n = len(call.log_ratios)
    if n == 0:
        return None
    mean = sum(call.log_ratios) / n
    half = t_one_sided_95(dof) * spread / math.sqrt(n)
    low, high = mean - half, mean + half
    edge = -math.log1p(-zone)  # a ratio of 1 - zone, on the log scale: -log(1 - zone)
    if -edge <= low and high <= edge:
        outcome = PairedOutcome.EQUAL
    elif high < -edge:
        outcome = PairedOutcome.FIRST_AHEAD
    elif low > edge:
        outcome = PairedOutcome.SECOND_AHEAD
    else:
        outcome = PairedOutcome.UNDECIDED
    return Judged(call, math.exp(mean), math.exp(low), math.exp(high), outcome)


def log_throughput(measurement: Measurement, run_epoch: int | None) -> float | None:
    """A process's log throughput as the run sees it (its windows' mean), what a pair compares;
    None for a window racing ended early, or none measured."""
    if measurement.behind:
        return None
    logs = [math.log(t) for _, t in window_figures(measurement, run_epoch) if t > 0 and math.isfinite(t)]
    return sum(logs) / len(logs) if logs else None
