"""Which record to recommend: among the trials tied with the best (selection.acceptable marks them),
the cheapest (choose: the pick every command makes); the tolerance test on single figures that
predictions and the search use (within_tolerance, beats); which rows contend; and the most a
config's loading processes can deliver (workers_bound)."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

from loadtune.asked.trials import IDEAL, cost_of
from loadtune.core.kinds import RankBy
from loadtune.record.record import PICK_FIRST_FORMAT, Record

T = TypeVar("T")


def choose(candidates: Iterable[T], within: Callable[[T], bool], cost: Callable[[T], tuple[float, ...]]) -> T | None:
    """The one rule for a pick: the cheapest candidate within the tolerance of the best (`within`
    says which are). Ties break by `cost` first (what the config costs to run, compared in order:
    trials.cost_of, with what the caller adds after it), then by the order the candidates come in
    (the first of equal cost: the better, when they come best first). None when none is within."""
    inside = [c for c in candidates if within(c)]
    return min(inside, key=cost) if inside else None


def within_tolerance(figure: float, best: float, tolerance: float, by: RankBy = RankBy.THROUGHPUT) -> bool:
    """Whether a figure is within the tolerance of the best one, on a scale where higher is better:
    a throughput at least (1 - tolerance) of the best's; a wait ratio (negated) at most `tolerance`
    above the best's."""
    return figure >= (1 - tolerance) * best if by == RankBy.THROUGHPUT else figure >= best - tolerance


def beats(figure: float, other: float, tolerance: float, by: RankBy = RankBy.THROUGHPUT) -> bool:
    """Whether a figure is better than another by more than the tolerance, on its own scale: a
    throughput above (1 + tolerance) of the other's; a wait ratio more than `tolerance` below it."""
    return figure > (1 + tolerance) * other if by == RankBy.THROUGHPUT else figure < other - tolerance


def contends(trial: str | None, ran: bool, flagged: bool) -> bool:
    """The one rule for a contender, a trial that may be ranked and picked: it ran, it is not the
    ideal (a reference, not a setting), and the data check did not flag it."""
    return ran and trial != IDEAL and not flagged


def record_contends(record: Record) -> bool:
    """A row that may be ranked and picked (contends)."""
    return contends(record.trial, record.ran, record.data_flagged)


def cost(record: Record) -> tuple[float, ...]:
    """What a config costs to run (trials.cost_of); of two that cost the same, the faster first."""
    return (*cost_of(record.to_dict()), -(record.throughput or 0))


def recommended(records: Sequence[Record]) -> Record | None:
    """The sweep's pick as its rows tell it: the first row tied with the best, in a file that puts
    the pick there (PICK_FIRST_FORMAT); in an older one, the cheapest of them (choose, by cost),
    as the sweep picked then. None when none ran."""
    first = next((r for r in records if r.assessment.tied_with_best), None)
    if first is not None and (first.run.format_version or 1) >= PICK_FIRST_FORMAT:
        return first
    return choose(records, lambda r: bool(r.assessment.tied_with_best), cost)


def tied_row(records: Sequence[Record], trial: str | None) -> Record | None:
    """`trial`'s row where the rows mark it tied with the best; None where they do not."""
    return next((r for r in records if r.trial == trial and r.assessment.tied_with_best), None)


def picked(records: Sequence[Record], pick: str | None) -> Record | None:
    """The recommendation: the sweep's own pick (racing's, which knows every setting's cost) where
    the rows still mark it tied with the best (tied_row), else the cheapest tied with the best
    (recommended)."""
    return tied_row(records, pick) or recommended(records)


# Settings that change neither what a worker does to make a batch nor how many workers make them,
# as far as a bound goes: a config differing from a measured one only in these cannot deliver more
# than the measured one's workers make (fetches_alike says which measured configs bound which).
# pin_memory is not among them: on a device its trials are the pipeline model's only evidence of a
# pinned copy.
FETCH_NEUTRAL = ("prefetch_factor", "persistent_workers")
# The measured fetch time a batch, lowered by this share before it bounds a config: the bound is
# a mean over one process's windows, and another process may fetch a little faster.
FETCH_BOUND_MARGIN = 0.10


def workers_bound(workers: int, batch_size: int, fetch_ms: float) -> float:
    """The most samples a second `workers` loading processes deliver when each takes `fetch_ms` to
    make a batch (less FETCH_BOUND_MARGIN): were the loop never to wait for anything else, the
    workers all busy and no epoch ever starting, it would run no faster."""
    return workers * batch_size / (bounding_fetch_ms(fetch_ms) / 1000)


def out_of_reach(workers: int, batch_size: int, fetch_ms: float, bar_samples_per_s: float, by: str) -> str | None:
    """Why a config with `workers` workers need not run, when the fetch time of the config `by`
    bounds it (workers_bound) below the throughput it needs to contend; else None."""
    bound = workers_bound(workers, batch_size, fetch_ms)
    if bound >= bar_samples_per_s:
        return None
    return (f"its {workers} worker{'s make' if workers > 1 else ' makes'} at most {bound:.0f} samples/s "
            f"({by} fetched a batch in {fetch_ms:.1f} ms, taken as {bounding_fetch_ms(fetch_ms):.1f}), "
            f"below the {bar_samples_per_s:.0f} it would need to contend")


def bounding_fetch_ms(fetch_ms: float) -> float:
    """The measured mean fetch time a batch as a bound takes it: less FETCH_BOUND_MARGIN."""
    return fetch_ms * (1 - FETCH_BOUND_MARGIN)


def fetches_alike(config: dict[str, object], measured: dict[str, object]) -> bool:
    """Whether the `measured` config's fetch time bounds `config`: both have workers and the same
    batch size, their loaders differ only in FETCH_NEUTRAL settings, and the measured one's fetches
    were no slower for them: workers started again every epoch fetch their first batches cold, so
    a config with persistent workers is not bounded by one without."""
    keys = (set(config) | set(measured)) - set(FETCH_NEUTRAL)
    return bool(config.get("num_workers")) and isinstance(config.get("batch_size"), int) \
        and all(config.get(k) == measured.get(k) for k in keys) \
        and (bool(measured.get("persistent_workers")) or not config.get("persistent_workers"))
