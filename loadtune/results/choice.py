"""Which record to recommend: among the trials tied with the best, the cheapest."""

from __future__ import annotations

from typing import Sequence

from loadtune.results.record import Record
from loadtune.trials import cost_of


def cost(record: Record) -> tuple[float, ...]:
    """What a config costs to run (trials.cost_of); of two that cost the same, the faster first."""
    return (*cost_of(record.to_dict()), -(record.throughput or 0))


def recommended(records: Sequence[Record]) -> Record | None:
    """Among the trials tied with the best, the cheapest (see cost); None when none ran."""
    tied = [r for r in records if r.tied_with_best]
    return min(tied, key=cost) if tied else None
