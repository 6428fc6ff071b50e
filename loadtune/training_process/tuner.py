"""Which DataLoader settings a tuned run tries next, and which it keeps (loadtune.tune): pure
decisions over the batches the real loop timed, with an injected clock.

Each setting is measured as a sweep's trial is: its warm-up dropped (measure.loop.WarmUp: the
first batches, and more for each worker), then a window of at least WINDOW_MIN_BATCHES batches
and `window_s` seconds of the loop's own wait and step, cut into BLOCKS blocks whose throughputs
give the spread. The pipeline model fitted to the start's window (as `loadtune predict` reads a
watched run) names up to MODEL_TRIES settings to try first, each measured. Then, from the best
so far, one change at a time: more workers (doubling, up to what the default sweep around a
watched loader tries: 3 a usable core, at least 4; after a doubling that did not pay, halfway back
to it), then a deeper prefetch, then pinned memory on
an accelerator. Persistent workers matter at each epoch's start: where the run may change
`persistent_workers`, every setting with workers the search proposes (the start is measured as
the loader has it) is tried with it on, as the one kept will run
(a window that crosses an epoch's start would otherwise charge more workers their start-up,
which the kept setting never pays), and the setting kept is made persistent.
A change is kept when it is faster than the setting kept so far by more than the zone: the
tolerance, or what the two windows' spread can resolve, the larger. A dimension stops at its first
change that is not kept (the workers once nothing is left between). The search stops, keeping the
best so far, when no change can gain more than the zone (a setting waiting a share w of the time
can gain at most 1 / (1 - w)), when nothing is left to try, or when `budget_s` is spent.
A window during which other processes used more than `max_outside_cpu` of the usable cores is
measured again (at most MAX_REDONE times), as a sweep measures a disturbed repeat again: one
busy moment of a neighbour would otherwise decide the rest of the run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from loadtune.asked.trials import DEFAULT_PREFETCH
from loadtune.core.kinds import MAX_OUTSIDE_CPU, MAX_REDONE, TOLERANCE
from loadtune.decide.selection import waiting_gain
from loadtune.measure.loop import WarmUp

WINDOW_MIN_BATCHES = 12
BLOCKS = 3
PREFETCH_STEPS = (4, 8)
MODEL_TRIES = 2  # the pipeline model's picks tried first
Z_TWO_SIDED = 1.96  # the two windows' difference is resolved at 95%

# Called as a window starts; what it returns, called as the window ends, is the share of the
# usable cores that processes other than the run's used meanwhile (None where it cannot tell).
Outside = Callable[[], Callable[[], "float | None"]]


@dataclass(frozen=True)
class Tried:
    """One setting's window in the real run: its throughput (samples per second of wait and step),
    each block's, and its wait ratio; or why it failed."""

    settings: dict[str, Any]
    samples_per_s: float = 0.0
    blocks: tuple[float, ...] = ()
    wait_ratio: float = 0.0
    failed: str = ""

    @property
    def relative_se(self) -> float:
        """The standard error of the throughput, relative to it (0 with fewer than 2 blocks)."""
        if len(self.blocks) < 2 or self.samples_per_s <= 0:
            return 0.0
        return statistics.stdev(self.blocks) / math.sqrt(len(self.blocks)) / self.samples_per_s


@dataclass
class _Window:
    """The counted batches of the setting being tried."""

    wait_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    seconds: float = 0.0  # the batches' waits and steps so far, kept as they come: asked every batch

    def add(self, wait_s: float, step_s: float, samples: int) -> None:
        self.wait_s.append(wait_s)
        self.step_s.append(step_s)
        self.samples.append(samples)
        self.seconds += wait_s + step_s

    def tried(self, settings: Mapping[str, Any]) -> Tried:
        n = len(self.samples)
        edges = [round(i * n / BLOCKS) for i in range(BLOCKS + 1)]
        blocks = tuple(sum(self.samples[a:b]) / (sum(self.wait_s[a:b]) + sum(self.step_s[a:b]))
                       for a, b in zip(edges, edges[1:]) if b > a)
        total = sum(self.wait_s) + sum(self.step_s)
        return Tried(dict(settings), sum(self.samples) / total, blocks, sum(self.wait_s) / total)


@dataclass
class _Trying:
    """The setting being measured now: its warm-up rule, whether the warm-up is done, its window,
    and whether the pipeline model named it."""

    settings: dict[str, Any]
    rule: WarmUp | None
    from_model: bool = False
    warm: bool = False
    window: _Window = field(default_factory=_Window)
    redone: int = 0  # its windows measured again, disturbed by other processes
    outside: Callable[[], float | None] | None = None  # the window's outside share, read at its end


@dataclass(frozen=True)
class Limits:
    """What the search may do: the settings it may change, the most workers it tries, whether
    batches go to an accelerator, and its time."""

    tune: tuple[str, ...]
    workers: int
    accelerator: bool
    budget_s: float
    window_s: float
    tolerance: float = TOLERANCE
    max_outside_cpu: float = MAX_OUTSIDE_CPU


@dataclass(frozen=True)
class _Asks:
    """What the search asks of the run: each setting's warm-up rule, whether workers it would
    add fit in memory (why not, or ""), and what other processes use during a window."""

    warmup: Callable[[Mapping[str, Any]], WarmUp]
    room_for: Callable[[int], str]
    outside: Outside | None


class Tuner:
    """The search: `current` is the setting the loop should run now; `add` takes each batch it ran."""

    def __init__(self, start: Mapping[str, Any], limits: Limits, clock: Callable[[], float],
                 warmup: Callable[[Mapping[str, Any]], WarmUp],
                 room_for: Callable[[int], str] = lambda added: "", outside: Outside | None = None) -> None:
        self.limits, self.clock = limits, clock
        self._asks = _Asks(warmup, room_for, outside)
        self.disturbed: list[float] = []  # the outside share of each window measured again
        self.kept: Tried | None = None  # the best setting measured so far
        self.tried: list[Tried] = []
        self.settled = False
        self.notes: list[str] = []  # settings not tried, and why
        self.started = clock()
        self._stage = 0
        self._suggested: list[dict[str, Any]] = []  # the pipeline model's picks, not tried yet
        self._begin(start)

    # --- the loop's batches -------------------------------------------------------------------

    def add(self, wait_s: float, step_s: float, samples: int) -> bool:
        """One batch of the current setting ran; True when the loop should switch now (`current`
        changed, or the search settled)."""
        if self.settled:
            return False
        trying = self._trying
        if not trying.warm:
            trying.warm = trying.rule is not None and trying.rule.after_batch() is True
            self._open(trying)
            return False
        window = trying.window
        window.add(wait_s, step_s, samples)
        if len(window.samples) < WINDOW_MIN_BATCHES or window.seconds < self.limits.window_s:
            return False
        if self._disturbed(trying):
            return False
        self._judge(window.tried(self.current))
        return True

    def _open(self, trying: _Trying) -> None:
        """A window starts (its warm-up done): the outside reading begins."""
        if trying.warm and self._asks.outside is not None:
            trying.outside = self._asks.outside()

    def _disturbed(self, trying: _Trying) -> bool:
        """Whether the window just ended is measured again: other processes used more than
        max_outside_cpu of the usable cores during it, and it was not measured again MAX_REDONE
        times already."""
        share = trying.outside() if trying.outside is not None else None
        if share is None or share <= self.limits.max_outside_cpu or trying.redone >= MAX_REDONE:
            return False
        self.disturbed.append(share)
        trying.redone += 1
        trying.window = _Window()
        self._open(trying)
        return True

    def suggest(self, configs: Sequence[Mapping[str, Any]]) -> None:
        """The pipeline model's picks for this loop, best first (fitted to the start's window): up to
        MODEL_TRIES of them, within the limits, are tried before the one-at-a-time changes, each
        measured whatever the one before it showed (the model may see past a change that alone does
        not pay, such as one worker where two pay)."""
        picks: list[dict[str, Any]] = []
        for config in configs:
            pick = {**self.current, **{k: config[k] for k in config if k in self.limits.tune and k in self.current}}
            pick = _proposed(pick, self.limits)
            if not pick.get("num_workers"):
                pick.update(prefetch_factor=None)
            else:  # a shallower queue than DataLoader's default shows its cost at epoch starts, not in a window
                pick["prefetch_factor"] = max(int(pick.get("prefetch_factor") or DEFAULT_PREFETCH), DEFAULT_PREFETCH)
            if int(pick.get("num_workers") or 0) <= self.limits.workers and pick not in picks and \
                    not any(t.settings == pick for t in self.tried):
                picks.append(pick)
        self._suggested = picks[:MODEL_TRIES]
        if self._suggested and not self.settled:
            self._next()

    @property
    def pending(self) -> list[dict[str, Any]]:
        """What the search will try next, as far as it knows: the setting now, then the model's picks left."""
        return ([dict(self.current)] if not self.settled else []) + [dict(s) for s in self._suggested]

    def failed(self, reason: str) -> bool:
        """The current setting failed: True when the search falls back to the setting kept so far
        and settles there; False when there is none, or the kept setting itself failed."""
        if self.kept is None or self.settled:
            return False
        self.tried.append(Tried(dict(self.current), failed=reason))
        self._settle()
        return True

    def follow(self, settings: Mapping[str, Any], settled: bool) -> None:
        """The setting decided elsewhere (rank 0's search, on another rank): run, not measured,
        and settled on when that search has settled."""
        self._trying = _Trying(dict(settings), None, warm=True)
        self.settled = settled

    @property
    def current(self) -> dict[str, Any]:
        """The setting the loop should run now."""
        return self._trying.settings

    # --- the search ---------------------------------------------------------------------------

    def _begin(self, settings: Mapping[str, Any], from_model: bool = False) -> None:
        self._trying = _Trying(dict(settings), self._asks.warmup(settings), from_model)

    def _judge(self, tried: Tried) -> None:
        self.tried.append(tried)
        kept = self.kept
        if kept is None or tried.samples_per_s > kept.samples_per_s * (1 + self.zone(kept, tried)):
            self.kept = tried
        elif not self._trying.from_model and STAGES[min(self._stage, len(STAGES) - 1)] is not _more_workers:
            self._stage += 1  # the first change along a setting that does not pay ends that setting
        # (workers go on halfway to the fewest that did not pay: _more_workers ends where none is between)
        self._next()

    def zone(self, a: Tried, b: Tried) -> float:
        """The smallest relative difference the two windows resolve, or the tolerance: the larger."""
        return max(self.limits.tolerance, Z_TWO_SIDED * math.hypot(a.relative_se, b.relative_se))

    def _next(self) -> None:
        kept = self.kept
        assert kept is not None
        if waiting_gain(kept.wait_ratio) <= self.limits.tolerance:
            self.notes.append(f"waiting {kept.wait_ratio:.1%} of the time, no setting can gain more than "
                              f"{waiting_gain(kept.wait_ratio):.1%}")
            return self._settle()
        if self.clock() - self.started >= self.limits.budget_s:
            self.notes.append(f"the budget of {self.limits.budget_s:g} s was spent")
            return self._settle()
        while self._suggested:
            pick = self._suggested.pop(0)
            if not any(t.settings == pick for t in self.tried) and self._fits(pick, kept):
                return self._begin(pick, from_model=True)
        while self._stage < len(STAGES):
            change = STAGES[self._stage](kept.settings, self.limits, self.tried)
            if change is not None and not any(t.settings == change for t in self.tried) and self._fits(change, kept):
                return self._begin(change)
            self._stage += 1
        self._settle()

    def _fits(self, change: Mapping[str, Any], kept: Tried) -> bool:
        """Whether the workers `change` adds fit in memory (a note where they do not)."""
        added = int(change.get("num_workers") or 0) - int(kept.settings.get("num_workers") or 0)
        short = self._asks.room_for(added) if added > 0 else ""
        if short:
            self.notes.append(f"num_workers={change['num_workers']} not tried: {short}")
        return not short

    def _settle(self) -> None:
        assert self.kept is not None
        self.settled = True
        if self.disturbed:
            self.notes.append(f"{len(self.disturbed)} window(s) measured again: other processes used up to "
                              f"{max(self.disturbed):.0%} of the cores (more than {self.limits.max_outside_cpu:.0%})")
        kept = dict(self.kept.settings)
        if "persistent_workers" in self.limits.tune and kept.get("num_workers") and not kept.get("persistent_workers"):
            # Its effect is at each epoch's start, which a window inside an epoch does not see.
            kept["persistent_workers"] = True
            self.notes.append("persistent_workers=True: the workers stay up from one epoch to the next")
        self._trying = _Trying(kept, None, warm=True)


def _more_workers(settings: Mapping[str, Any], limits: Limits, tried: Sequence[Tried] = ()) -> dict[str, Any] | None:
    """Twice the workers; where more were tried and did not pay (or failed), halfway to the fewest
    such, so that a doubling past the best (2 to 4 where 3 is best) is not the last word."""
    workers = int(settings.get("num_workers") or 0)
    if "num_workers" not in limits.tune or workers >= limits.workers:
        return None
    above = [n for n in (int(t.settings.get("num_workers") or 0) for t in tried) if n > workers]
    more = (workers + min(above)) // 2 if above else min(max(1, 2 * workers), limits.workers)
    if more <= workers:
        return None
    return _proposed({**settings, "num_workers": more,
                      "prefetch_factor": settings.get("prefetch_factor") or DEFAULT_PREFETCH}, limits)


def _proposed(settings: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """A setting the search proposes, its workers kept between epochs as the setting kept will
    keep them (_settle) where the run may change that, else as the loader has it; off without
    workers."""
    workers = bool(settings.get("num_workers"))
    keep = bool(settings.get("persistent_workers")) or "persistent_workers" in limits.tune
    return {**settings, "persistent_workers": workers and keep}


def _deeper_prefetch(settings: Mapping[str, Any], limits: Limits, tried: Sequence[Tried] = ()) -> dict[str, Any] | None:
    if "prefetch_factor" not in limits.tune or not settings.get("num_workers"):
        return None
    now = int(settings.get("prefetch_factor") or DEFAULT_PREFETCH)
    deeper = next((p for p in PREFETCH_STEPS if p > now), None)
    return _proposed({**settings, "prefetch_factor": deeper}, limits) if deeper is not None else None


def _pinned(settings: Mapping[str, Any], limits: Limits, tried: Sequence[Tried] = ()) -> dict[str, Any] | None:
    if "pin_memory" not in limits.tune or not limits.accelerator or settings.get("pin_memory"):
        return None
    return _proposed({**settings, "pin_memory": True}, limits)


# Each stage proposes the next change from the kept setting; a stage runs again while its change pays.
STAGES: tuple[Callable[[Mapping[str, Any], Limits, Sequence[Tried]], dict[str, Any] | None], ...] = (
    _more_workers, _deeper_prefetch, _pinned)
