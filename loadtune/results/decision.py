"""How sure a sweep's pick is: what racing decided, and the contenders the pipeline model and
the data tied with the pick."""

from __future__ import annotations

from dataclasses import dataclass

from loadtune.kinds import EndedBy


@dataclass(frozen=True)
class ModelTie:
    """Two trials the pipeline model explains as equal whose measurements agree within the
    spread between processes: tied, the cheaper picked, neither raced further."""

    pick: str
    other: str
    predicted_ratio: float  # predicted throughput of other / pick
    measured_ratio: float  # measured throughput of other / pick
    spread: float  # the spread between processes it was judged against (log sd)
    spread_source: str  # "processes" (repeats of the same trials) or "model" (the fit's residuals)

    def facing(self, pick: str) -> "ModelTie":
        """The tie as seen from `pick`: the other trial's predicted and measured ratios to it."""
        if self.pick == pick:
            return self
        return ModelTie(pick, self.pick, 1 / self.predicted_ratio, 1 / self.measured_ratio, self.spread,
                        self.spread_source)


@dataclass(frozen=True)
class Resolving:
    """What the sweep could resolve: the spread between processes (log sd of a repeat's
    throughput, or the wait ratio's sd; None before it was known), measure.repeats, the
    indifference zone the pick was judged at (the tolerance, or the least difference the repeats
    resolve at that spread, the larger: differences inside it are equal, and the cheapest of the
    equals is the pick) and the most any config can beat the pick by (its wait ratio and the
    ideal row bound it; None where unknown)."""

    spread: float | None = None
    repeats: int = 0
    zone: float | None = None
    bound: float | None = None


@dataclass(frozen=True)
class Decision:
    """How sure the pick is: decided (every other contender is equal to it within the zone, or
    shown behind, or nothing left can beat it by more than the zone), or not, with the
    contenders still undecided and what may be left on the table."""

    decided: bool
    tolerance: float
    pick: str | None = None  # the cheapest trial within the zone of the best: the recommendation
    undecided: tuple[str, ...] = ()
    gap: float = 0.0  # at most this share of throughput may be lost by the pick
    why: str = ""  # what ended the racing when undecided, in words
    expected: float | None = None  # the pick's largest expected shortfall against the undecided
    ties: tuple[ModelTie, ...] = ()  # contenders the model and the data tied with the pick
    ended_by: EndedBy | None = None  # what ended the racing when undecided
    # The contenders as good as the best within the zone ('=1' in the table, tied_with_best in
    # the CSV), best first, the pick left out: either will do.
    equal: tuple[str, ...] = ()
    resolving: Resolving = Resolving()

    @property
    def zone(self) -> float:
        """The indifference zone the pick was judged at (the tolerance where none was recorded)."""
        return self.resolving.zone if self.resolving.zone is not None else self.tolerance


def ended(kept: bool, budget_spent: bool) -> EndedBy:
    """What ended the racing of an undecided pick: a contender kept from the file (never measured
    again), else the time budget, else measure.repeats."""
    return EndedBy.KEPT if kept else EndedBy.BUDGET if budget_spent else EndedBy.REPEATS


def ended_words(ended_by: EndedBy | str | None, repeats: int) -> str:
    """What ended the racing, in words (Decision.why)."""
    if ended_by == EndedBy.KEPT:
        return "trials kept from the file were not measured again"
    if ended_by == EndedBy.BUDGET:
        return "the time budget (--budget) ran out"
    return f"measure.repeats={repeats} ran out"
