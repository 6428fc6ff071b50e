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
class Decision:
    """How sure the pick is: decided (shown as good as every other contender, within the
    tolerance), or not, with the contenders still undecided and what may be left on the table."""

    decided: bool
    tolerance: float
    pick: str | None = None  # the cheapest trial shown as good as the best: the recommendation
    undecided: tuple[str, ...] = ()
    gap: float = 0.0  # at most this share of throughput may be lost by the pick
    why: str = ""  # what ended the racing when undecided, in words
    expected: float | None = None  # the pick's largest expected shortfall against the undecided
    ties: tuple[ModelTie, ...] = ()  # contenders the model and the data tied with the pick
    ended_by: EndedBy | None = None  # what ended the racing when undecided
    spread: float | None = None  # the spread between processes (log sd of a repeat's throughput)
    repeats: int = 0  # measure.repeats
    # Contenders as good as the pick within this machine's noise (shown within the tolerance, or
    # expected to cost it at most the tolerance), best first: either will do.
    equal: tuple[str, ...] = ()


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
