"""Order trials best first, and their records with them (apply_ranking); a trial acceptable in
place of the leader of its group (shown within the tolerance of it, or equal within the noise:
see selection) shares the leader's rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from loadtune.asked.trials import cost_of
from loadtune.core.kinds import TOLERANCE, RankBy, Status
from loadtune.decide.selection import Scored, Ties, acceptable, order, point_loss
from loadtune.record.record import Record


def scored_from_record(record: Record) -> Scored:
    """The score of a trial measured earlier, as its record keeps it (no raw samples now)."""
    return Scored(record.trial or "", record.throughput_interval, record.wait_ratio_interval,
                  cost=cost_of(record.to_dict()))


@dataclass(frozen=True)
class Placing:
    rank: int
    tied_with_best: bool


def rank(items: Sequence[Scored], by: RankBy = RankBy.THROUGHPUT, tolerance: float = TOLERANCE,
         ties: Ties = frozenset(), pick: str | None = None, behind: frozenset[str] = frozenset(),
         unresolved: frozenset[str] = frozenset()) -> dict[str, Placing]:
    """Competition ranks (1, 1, 3, ...): a trial acceptable in place of its group's leader shares
    the leader's rank (a trial `unresolved`, which racing left as it was, also where its
    estimate lies within `tolerance`, the sweep's zone, of the leader's); one that cannot be told
    yet starts a group of its own. The pick (the baseline kept because no change is shown to pay)
    is among the best, wherever it places. A trial `behind` (its window ended early, clearly
    behind the leader: figures from part of a window) places by its figures, but after the best
    group and never in another's."""
    by = RankBy(by)  # a ValueError for anything else

    def alike(item: Scored, leader: Scored) -> bool:
        return acceptable(item, leader, tolerance, by, ties) or \
            (item.name in unresolved and point_loss(item, leader, by) <= tolerance)

    placings: dict[str, Placing] = {}
    leader: Scored | None = None
    group_rank = 0
    ordered = _behind_the_best(order(items, by), alike, behind)
    for position, item in enumerate(ordered, start=1):
        if leader is None or item.name in behind or not alike(item, leader):
            leader, group_rank = item, position
        placings[item.name] = Placing(1 if item.name == pick else group_rank, group_rank == 1 or item.name == pick)
    return placings


def _behind_the_best(ordered: list[Scored], alike: Callable[[Scored, Scored], bool],
                     behind: frozenset[str]) -> list[Scored]:
    """`ordered` with the trials `behind` moved after the best group: the leader measured in full
    and the trials measured in full that follow it `alike` it."""
    full = [item for item in ordered if item.name not in behind]
    if not behind or not full:
        return ordered
    best = [full[0]]
    for item in full[1:]:
        if not alike(item, full[0]):
            break
        best.append(item)
    return best + [item for item in ordered if item not in best]


def apply_ranking(records: Sequence[Record], placings: Mapping[str, Placing],
                  baseline_throughput: float | None, ideal_throughput: float | None = None,
                  pick: str | None = None) -> list[Record]:
    """Records with rank, tied_with_best, speedup and pct_of_ideal filled in: ranked records best
    first (the `pick` first of its rank: readers of the file take it as the recommendation,
    choice.recommended), then the unranked reference records that ran (the ideal), then those the
    data check flagged, then those that did not run."""
    out = []
    for record in records:
        placing = placings.get(record.trial or "")
        changes: dict[str, Any] = {"rank": placing.rank if placing else None,
                                   "tied_with_best": placing.tied_with_best if placing else None}
        if record.throughput is not None:
            if baseline_throughput:
                changes["speedup"] = round(record.throughput / baseline_throughput, 3)
            if ideal_throughput:
                changes["pct_of_ideal"] = round(100 * record.throughput / ideal_throughput, 1)
        out.append(record.with_columns(**changes))
    ranked = sorted((r for r in out if r.rank is not None),
                    key=lambda r: (r.rank, r.trial != pick, -(r.throughput or 0)))
    reference = [r for r in out if r.rank is None and r.status == Status.OK and not r.data_flagged]
    flagged = [r for r in out if r.rank is None and r.status == Status.OK and r.data_flagged]
    return ranked + reference + flagged + [r for r in out if r.rank is None and r.status != Status.OK]
