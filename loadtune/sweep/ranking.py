"""Order trials best first; trials whose intervals overlap the leader of a group share its rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from loadtune.results.interval import Interval
from loadtune.results.record import Record

RANK_BY = ("throughput", "wait_ratio")


@dataclass(frozen=True)
class Scored:
    name: str
    throughput: Interval | None  # None: the trial did not run
    wait_ratio: Interval | None


def scored_from_record(record: Record) -> Scored:
    """The score of a trial measured earlier, as its record keeps it."""
    return Scored(record.trial, record.throughput_interval, record.wait_ratio_interval)


@dataclass(frozen=True)
class Placing:
    rank: int
    tied_with_best: bool


def _metric(item: Scored, by: str) -> Interval:
    return item.throughput if by == "throughput" else item.wait_ratio


def order(items: Sequence[Scored], by: str = "throughput") -> list[Scored]:
    """Items that ran, best first: highest throughput, or lowest wait ratio then highest throughput."""
    if by not in RANK_BY:
        raise ValueError(f"rank by {by!r}: expected one of {', '.join(RANK_BY)}")
    ran = [i for i in items if i.throughput is not None and i.wait_ratio is not None]
    if by == "throughput":
        return sorted(ran, key=lambda i: -i.throughput.mean)
    return sorted(ran, key=lambda i: (i.wait_ratio.mean, -i.throughput.mean))


def rank(items: Sequence[Scored], by: str = "throughput") -> dict[str, Placing]:
    """Competition ranks (1, 1, 3, ...): a trial whose interval overlaps the interval of its
    group's leader is indistinguishable from it and shares the leader's rank."""
    placings: dict[str, Placing] = {}
    leader: Scored | None = None
    group_rank = 0
    for position, item in enumerate(order(items, by), start=1):
        if leader is None or not _metric(item, by).overlaps(_metric(leader, by)):
            leader, group_rank = item, position
        placings[item.name] = Placing(group_rank, group_rank == 1)
    return placings
